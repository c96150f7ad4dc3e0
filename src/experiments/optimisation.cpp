// SPDX-License-Identifier: Apache-2.0
// `multihead experiment optimisation`: gradient clipping and warmup.
#include <filesystem>
#include <map>

#include "common.h"
#include "multihead/report/plots.h"
#include "multihead/tasks/sequence_task.h"

namespace multihead::experiment {

using json = nlohmann::json;

// Claims: clipping gradients at 0.1 works best; warmup stabilises training.
// Post-LN layers (the original Transformer's, which warmup was introduced
// for) and a learning rate high enough for instability to show (5e-3).
ExperimentReport optimisation_experiment(ExperimentContext& c) {
  const bool q = c.opt.quick;
  const std::vector<double> clips = {0.1, 1.0, 0.0};  // 0: none
  const std::vector<std::int64_t> warmups = {q ? 2 : 100, 0};
  json runs = json::array();
  ExperimentTable t;
  t.title = "Reverse task, lengths 1 to 16, post-LN, AdamW at learning rate 5e-3 (cosine decay)";
  t.columns = {"clip_grad_norm", "warmup steps", "final loss", "token accuracy", "sequence accuracy", "loss spikes"};
  std::vector<Series> curves;
  for (double clip : clips) {
    for (std::int64_t warmup : warmups) {
      const std::string label = fmt::format("clip{}_warmup{}", clip > 0 ? fmt::format("{}", clip) : "none", warmup);
      std::vector<double> final_loss, tok, seq, spikes;
      Series curve{label, {}, {}};
      for (std::uint64_t seed : c.seeds()) {
        SequenceTaskJob j = sequence_job(c, 16);
        j.test_lengths = {16};
        j.train.steps = q ? 30 : 1500;
        j.train.schedule.base_lr = 5e-3;
        j.model.layer.norm_first = false;
        j.train.schedule.warmup_steps = warmup;
        j.train.clip_grad_norm = clip;
        SequenceTaskResult r = run_quietly(c, j, label, seed);
        // Final loss: the mean of the last 5% of steps, so one batch does not decide it.
        const std::size_t tail = std::max<std::size_t>(1, r.losses.size() / 20);
        std::vector<double> last(r.losses.end() - static_cast<std::ptrdiff_t>(tail), r.losses.end());
        final_loss.push_back(mean(last));
        tok.push_back(r.by_length[0].token_accuracy);
        seq.push_back(r.by_length[0].sequence_accuracy);
        spikes.push_back(static_cast<double>(count_loss_spikes(r.losses)));
        runs.push_back({{"clip_grad_norm", clip},
                        {"warmup_steps", warmup},
                        {"seed", seed},
                        {"final_loss", final_loss.back()},
                        {"token_accuracy", tok.back()},
                        {"sequence_accuracy", seq.back()},
                        {"loss_spikes", spikes.back()},
                        {"losses", r.losses}});
        if (seed == 1)
          for (std::size_t s = 0; s < r.losses.size(); ++s) {
            curve.x.push_back(static_cast<double>(s + 1));
            curve.y.push_back(r.losses[s]);
          }
      }
      c.log.log(
          fmt::format("optimisation: {}: final loss {:.4f}, {:.1f} spikes", label, mean(final_loss), mean(spikes)));
      t.rows.push_back({clip > 0 ? fmt::format("{}", clip) : "none", std::to_string(warmup), mean_std(final_loss, 4),
                        pct(tok, 1), pct(seq, 1), mean_std(spikes, 1)});
      curve.y = smoothed(curve.y, 0.95);  // six noisy curves over each other: their trends
      curves.push_back(curve);
    }
  }
  line_plot_png((std::filesystem::path(c.dir) / "loss.png").string(), "Training loss (seed 1, moving average 0.95)",
                "step", "cross-entropy", curves);
  ExperimentReport r;
  r.tables = {t};
  r.results = {{"runs", runs},
               {"spike_rule", fmt::format("a step whose loss exceeds twice the median of the 20 steps before it, "
                                          "and that median by more than {} nats",
                                          kSpikeNats)}};
  return r;
}

}  // namespace multihead::experiment
