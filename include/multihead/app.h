// SPDX-License-Identifier: Apache-2.0
// multihead's applications (multihead::app, over multihead::train): the
// tasks and their jobs, trained runs that answer inputs, the HTTP server,
// experiments, benchmarks, and the reports, plots and attention explorer a
// run writes. Links cairo besides the layers below.
#pragma once

#include "multihead/train.h"

#include "multihead/experiments/experiments.h"
#include "multihead/report/plots.h"
#include "multihead/report/run_report.h"
#include "multihead/serve/server.h"
#include "multihead/tasks/jobs.h"
#include "multihead/tasks/presets.h"
#include "multihead/tasks/trained_run.h"
