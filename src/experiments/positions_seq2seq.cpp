// SPDX-License-Identifier: Apache-2.0
// `multihead experiment positions-seq2seq`: the articles' table of
// positional encodings in translation, redone on an encoder-decoder that
// learns pronunciation from spelling (CMUdict; --quick: a synthetic
// dictionary).
#include <filesystem>
#include <map>

#include <fmt/ranges.h>

#include "common.h"
#include "multihead/data/cmudict.h"
#include "multihead/io/atomic_file.h"
#include "multihead/tasks/pronunciation.h"

namespace multihead::experiment {

using json = nlohmann::json;

namespace {

// The encoder-decoder of the cmudict preset trained for one epoch on the
// words of at most 10 letters, in bf16, tested greedily on unseen words of
// every length; --quick: a tiny model on a synthetic dictionary.
struct PronunciationGrid {
  PronunciationJob job;
  double wer_threshold = 0;  // validation WER whose first crossing is "steps to reach"
};

PronunciationGrid pronunciation_grid(const ExperimentContext& c) {
  PronunciationGrid g;
  PronunciationJob& j = g.job;
  j.threads = c.opt.threads;
  j.decode.beam = 1;
  if (c.opt.quick) {
    j.data_path = (std::filesystem::path(c.dir) / "dict.txt").string();
    write_file_atomic(j.data_path, regular_spelling_dictionary(180, 6));
    j.validation_fraction = j.test_fraction = 0.1;
    j.train_max_letters = 6;
    j.model.model.num_layers = 1;
    j.model.model.layer.d_model = 16;
    j.model.model.layer.nhead = 2;
    j.model.model.layer.dim_feedforward = 32;
    j.train.batch = 16;
    j.train.schedule.warmup_steps = 4;
    j.budget.epochs = 3;
    j.eval_every = 5;
    j.validation_words = 0;
    g.wer_threshold = 0.9;
    return g;
  }
  j.train_max_letters = 10;
  j.train.precision = Precision::kBF16;
  j.budget.epochs = 1;
  j.eval_every = 100;
  j.validation_words = 500;
  g.wer_threshold = 0.6;
  return g;
}

// The first validation step whose word error rate is at most `wer`, or "-".
std::string steps_to(const std::vector<std::pair<std::int64_t, double>>& curve, double wer) {
  for (const auto& [step, accuracy] : curve)
    if (1.0 - accuracy <= wer) return std::to_string(step);
  return "-";
}

// Claims (Vaswani et al. 2017; Shaw et al. 2018, on WMT14 English-German):
// BLEU 28.3 with sinusoidal positions, 28.7 learned, 29.1 relative;
// converging in 120k, 150k and 180k steps; BLEU falling 23% beyond 128 tokens.
ExperimentTable pronunciation_positions(ExperimentContext& c, json& runs) {
  const PronunciationGrid g = pronunciation_grid(c);
  const std::vector<std::string> kinds = {"sinusoidal", "learned", "relative", "rope", "alibi"};
  std::map<std::string, std::vector<double>> wer, per, bleu, longer, ms;
  std::map<std::string, std::vector<std::string>> reach;
  for (const auto& kind : kinds)
    for (std::uint64_t seed : c.seeds()) {
      PronunciationJob j = g.job;
      j.model.model.positions = parse_position_kind(kind);
      const PronunciationResult r = run_quietly(c, j, "cmudict_" + kind, seed);
      wer[kind].push_back(r.test.word_error_rate);
      per[kind].push_back(r.test.phoneme_error_rate);
      bleu[kind].push_back(r.test.bleu);
      longer[kind].push_back(r.longer_than_training.word_error_rate);
      ms[kind].push_back(r.ms_per_step);
      reach[kind].push_back(steps_to(r.validation_curve, g.wer_threshold));
      json curve = json::array();
      for (const auto& [step, accuracy] : r.validation_curve) curve.push_back({step, 1.0 - accuracy});
      runs.push_back({{"task", "pronunciation"},
                      {"positions", kind},
                      {"seed", seed},
                      {"test_wer", r.test.word_error_rate},
                      {"test_per", r.test.phoneme_error_rate},
                      {"test_bleu", r.test.bleu},
                      {"longer_words", r.longer_than_training.examples},
                      {"longer_wer", r.longer_than_training.word_error_rate},
                      {"ms_per_step", r.ms_per_step},
                      {"steps", r.steps},
                      {"validation_wer", curve}});
      c.log.log(fmt::format("positions (pronunciation): {} seed {}: WER {:.1f}%, longer words {:.1f}%, {:.1f} ms/step",
                            kind, seed, 100 * r.test.word_error_rate, 100 * r.longer_than_training.word_error_rate,
                            r.ms_per_step));
    }
  ExperimentTable t;
  t.title = fmt::format(
      "Pronunciation from spelling ({}), trained {} epoch{} on words of at most {} letters, tested "
      "greedily",
      c.opt.quick ? "a synthetic dictionary" : "CMUdict", g.job.budget.epochs, g.job.budget.epochs == 1 ? "" : "s",
      g.job.train_max_letters);
  t.columns = {"positions",
               "test WER",
               "test PER",
               "test BLEU",
               fmt::format("WER, words over {} letters", g.job.train_max_letters),
               fmt::format("steps to validation WER <= {:.0f}%", 100 * g.wer_threshold),
               "ms per step",
               "step time vs sinusoidal"};
  const double sin_ms = mean(ms["sinusoidal"]);
  for (const auto& kind : kinds) {
    t.rows.push_back({kind, pct(wer[kind], 1), pct(per[kind], 1), mean_std(bleu[kind], 1, 100.0), pct(longer[kind], 1),
                      fmt::format("{}", fmt::join(reach[kind], " / ")), mean_std(ms[kind], 1),
                      fmt::format("{:+.0f}%", 100 * (mean(ms[kind]) / sin_ms - 1))});
  }
  return t;
}

}  // namespace

ExperimentReport seq2seq_positions_experiment(ExperimentContext& c) {
  ExperimentReport r;
  json runs = json::array();
  r.tables = {pronunciation_positions(c, runs)};
  r.results = {{"runs", runs}};
  return r;
}

}  // namespace multihead::experiment
