// The experiments on synthetic sequence tasks (no dataset needed): positions
// and length extrapolation, attention variants against length, and the
// optimisation settings (clipping, warmup).
#include <filesystem>
#include <map>

#include "experiment_common.h"
#include "multihead/io/plots.h"
#include "multihead/train/sequence_task.h"

namespace multihead::experiment {
namespace {

using json = nlohmann::json;

// A small causal LM on the reverse task, sized by --quick.
SequenceTaskJob base_job(const Context& c, std::int64_t max_len) {
  SequenceTaskJob j;
  const bool q = c.opt.quick;
  j.task.kind = SyntheticKind::kReverse;
  j.task.min_len = 1;
  j.task.max_len = max_len;
  j.model.num_layers = q ? 1 : 2;
  j.model.layer.d_model = q ? 16 : 64;
  j.model.layer.nhead = q ? 2 : 4;
  j.model.layer.dim_feedforward = q ? 32 : 128;
  j.train.batch = q ? 8 : 32;
  j.train.steps = q ? 20 : 2500;
  j.train.schedule.warmup_steps = q ? 2 : 100;
  j.eval_batches = q ? 1 : 4;
  j.threads = c.opt.threads;
  return j;
}

SequenceTaskResult run_quietly(const Context& c, const SequenceTaskJob& job, const std::string& label,
                               std::uint64_t seed) {
  return run_job(c, job, label, seed, run_sequence_task);
}

}  // namespace

// Claims: sinusoidal positions train fastest but extrapolate badly; learned
// ones are ~20% slower with medium extrapolation; relative ones ~35% slower
// with the best extrapolation (Shaw et al. measured 7%).
ExperimentReport positions_experiment(Context& c) {
  const bool q = c.opt.quick;
  const std::vector<std::string> kinds = {"none", "sinusoidal", "learned", "relative", "rope", "alibi"};
  const std::int64_t train_len = q ? 8 : 64;
  const std::vector<std::int64_t> lengths = q ? std::vector<std::int64_t>{8, 16, 32}
                                              : std::vector<std::int64_t>{64, 128, 256};
  SequenceTaskJob base = base_job(c, train_len);
  base.test_lengths = lengths;
  // Per kind: token accuracy per test length, sequence accuracy at the
  // training length, ms per step; each a list over seeds.
  std::map<std::string, std::vector<std::vector<double>>> tok;
  std::map<std::string, std::vector<double>> seq, ms;
  json runs = json::array();
  for (const auto& kind : kinds) {
    tok[kind].assign(lengths.size(), {});
    for (std::uint64_t seed : c.seeds()) {
      SequenceTaskJob j = base;
      j.model.positions = parse_position_kind(kind);
      SequenceTaskResult r = run_quietly(c, j, kind, seed);
      for (std::size_t i = 0; i < lengths.size(); ++i) tok[kind][i].push_back(r.by_length[i].token_accuracy);
      seq[kind].push_back(r.by_length[0].sequence_accuracy);
      ms[kind].push_back(r.ms_per_step);
      json rec = {{"positions", kind}, {"seed", seed}, {"ms_per_step", r.ms_per_step}, {"by_length", json::array()}};
      for (const auto& a : r.by_length)
        rec["by_length"].push_back({{"length", a.length}, {"token_accuracy", a.token_accuracy},
                                    {"sequence_accuracy", a.sequence_accuracy}});
      runs.push_back(rec);
      c.log.log(fmt::format("positions: {} seed {}: token accuracy {:.1f}% at {}, {:.1f} ms/step", kind, seed,
                            100 * r.by_length.back().token_accuracy, lengths.back(), r.ms_per_step));
    }
  }
  ExperimentTable t;
  t.title = fmt::format("Reverse task, trained on lengths 1 to {}, {} steps", train_len, base.train.steps);
  t.columns = {"positions"};
  for (auto L : lengths) t.columns.push_back(fmt::format("token accuracy at {}", L));
  t.columns.push_back(fmt::format("sequence accuracy at {}", lengths[0]));
  t.columns.push_back("ms per step");
  t.columns.push_back("step time vs sinusoidal");
  const double sin_ms = mean(ms["sinusoidal"]);
  std::vector<Series> curves;
  for (const auto& kind : kinds) {
    std::vector<std::string> row = {kind};
    Series s{kind, {}, {}};
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      row.push_back(pct(tok[kind][i], 1));
      s.x.push_back(static_cast<double>(lengths[i]));
      s.y.push_back(mean(tok[kind][i]));
    }
    row.push_back(pct(seq[kind], 1));
    row.push_back(mean_std(ms[kind], 1));
    row.push_back(fmt::format("{:+.0f}%", 100 * (mean(ms[kind]) / sin_ms - 1)));
    t.rows.push_back(row);
    curves.push_back(s);
  }
  line_plot_png((std::filesystem::path(c.dir) / "token_accuracy_by_length.png").string(),
                "Token accuracy by test length", "length", "token accuracy", curves);
  ExperimentReport r;
  r.tables = {t};
  r.results = {{"runs", runs}, {"train_max_len", train_len}, {"steps", base.train.steps}};
  return r;
}

// Full, block-sparse, sliding-window and linear attention on the copy task,
// trained and tested at growing lengths: accuracy, time and memory.
ExperimentReport variants_experiment(Context& c) {
  const bool q = c.opt.quick;
  const std::vector<std::string> variants = {"full", "block_sparse", "sliding_window", "linear"};
  const std::vector<std::int64_t> lengths = q ? std::vector<std::int64_t>{8, 16}
                                              : std::vector<std::int64_t>{64, 128, 256};
  const std::int64_t window = q ? 4 : 32;
  json runs = json::array();
  ExperimentTable t;
  t.title = fmt::format("Copy task at each length (trained and tested there); window {} keys, blocks of {}",
                        window, window);
  t.columns = {"attention", "length", "token accuracy", "sequence accuracy", "ms per step", "peak activations MiB"};
  std::map<std::string, Series> time_curves, acc_curves;
  for (const auto& v : variants) {
    for (std::int64_t L : lengths) {
      std::vector<double> tok, seq, ms, mem;
      for (std::uint64_t seed : c.seeds()) {
        SequenceTaskJob j = base_job(c, L);
        j.task.kind = SyntheticKind::kCopy;
        j.task.min_len = L;
        j.test_lengths = {L};
        j.train.batch = q ? 4 : 16;
        j.train.steps = q ? 10 : 600;
        j.model.positions = PositionKind::kRope;
        AttentionPattern& p = j.model.layer.pattern;
        p.variant = parse_attention_variant(v);
        p.window_left = p.window_right = window;
        p.sparse_block = window;
        SequenceTaskResult r = run_quietly(c, j, fmt::format("{}_L{}", v, L), seed);
        tok.push_back(r.by_length[0].token_accuracy);
        seq.push_back(r.by_length[0].sequence_accuracy);
        ms.push_back(r.ms_per_step);
        mem.push_back(static_cast<double>(r.peak_activation_bytes) / (1024.0 * 1024.0));
        runs.push_back({{"attention", v}, {"length", L}, {"seed", seed}, {"token_accuracy", tok.back()},
                        {"sequence_accuracy", seq.back()}, {"ms_per_step", r.ms_per_step},
                        {"peak_activation_bytes", r.peak_activation_bytes}});
      }
      c.log.log(fmt::format("variants: {} at {}: token accuracy {:.1f}%, {:.1f} ms/step", v, L, 100 * mean(tok),
                            mean(ms)));
      t.rows.push_back({v, std::to_string(L), pct(tok, 1), pct(seq, 1), mean_std(ms, 1), mean_std(mem, 1)});
      time_curves[v].name = acc_curves[v].name = v;
      time_curves[v].x.push_back(static_cast<double>(L));
      time_curves[v].y.push_back(mean(ms));
      acc_curves[v].x.push_back(static_cast<double>(L));
      acc_curves[v].y.push_back(mean(tok));
    }
  }
  auto values = [](const std::map<std::string, Series>& m) {
    std::vector<Series> s;
    for (const auto& [k, v] : m) s.push_back(v);
    return s;
  };
  line_plot_png((std::filesystem::path(c.dir) / "ms_per_step.png").string(), "Training step time", "length",
                "ms per step", values(time_curves));
  line_plot_png((std::filesystem::path(c.dir) / "token_accuracy.png").string(), "Token accuracy", "length",
                "token accuracy", values(acc_curves));
  ExperimentReport r;
  r.tables = {t};
  r.results = {{"runs", runs}};
  return r;
}

// Claims: clipping gradients at 0.1 works best; warmup stabilises training.
// Post-LN layers (the original Transformer's, which warmup was introduced
// for) and a learning rate high enough for instability to show (5e-3).
ExperimentReport optimisation_experiment(Context& c) {
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
        SequenceTaskJob j = base_job(c, 16);
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
        runs.push_back({{"clip_grad_norm", clip}, {"warmup_steps", warmup}, {"seed", seed}, {"final_loss", final_loss.back()},
                        {"token_accuracy", tok.back()}, {"sequence_accuracy", seq.back()}, {"loss_spikes", spikes.back()},
                        {"losses", r.losses}});
        if (seed == 1)
          for (std::size_t s = 0; s < r.losses.size(); ++s) {
            curve.x.push_back(static_cast<double>(s + 1));
            curve.y.push_back(r.losses[s]);
          }
      }
      c.log.log(fmt::format("optimisation: {}: final loss {:.4f}, {:.1f} spikes", label, mean(final_loss),
                            mean(spikes)));
      t.rows.push_back({clip > 0 ? fmt::format("{}", clip) : "none", std::to_string(warmup), mean_std(final_loss, 4),
                        pct(tok, 1), pct(seq, 1), mean_std(spikes, 1)});
      curves.push_back(curve);
    }
  }
  line_plot_png((std::filesystem::path(c.dir) / "loss.png").string(), "Training loss (seed 1)", "step",
                "cross-entropy", curves);
  ExperimentReport r;
  r.tables = {t};
  r.results = {{"runs", runs},
               {"spike_rule", fmt::format("a step whose loss exceeds twice the median of the 20 steps before it, "
                                          "and that median by more than {} nats", kSpikeNats)}};
  return r;
}

}  // namespace multihead::experiment
