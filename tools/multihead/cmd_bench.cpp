// SPDX-License-Identifier: Apache-2.0
// multihead bench attention | gemm
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "multihead/bench/attention_bench.h"
#include "multihead/bench/train_bench.h"
#include "multihead/kernels/gemm.h"
#include "multihead/kernels/gemm_bf16.h"
#include "multihead/kernels/gemm_int8.h"
#include "multihead/kernels/machine.h"
#include "multihead/nn/models.h"
#include "multihead/train/distributed.h"

namespace multihead::cli {
namespace {

struct BenchOpts {
  AttentionBenchConfig attn;
  std::string impl = "fused";
  std::string tile_gemm = "auto";
  std::string attention = "full";
  std::string precision = "fp32";
  std::string gemm = "onednn";
  std::string positions = "none";
  bool json = false;
  int threads = 0;  // 0: all cores
  std::int64_t m = 4096, n = 1536, k = 512;
  TrainBenchConfig train;
};

// Reads the machine after a benchmark has set threads and backend, and
// prints it as the output's first line.
MachineInfo print_machine() {
  MachineInfo machine = machine_info();
  fmt::print("machine: {}\n", machine_summary(machine));
  return machine;
}

void run_attention(BenchOpts& o) {
  check<ConfigError>(o.impl == "fused" || o.impl == "reference", "--impl must be fused or reference, got '{}'", o.impl);
  o.attn.impl = o.impl == "fused" ? AttentionImpl::kFused : AttentionImpl::kReference;
  check<ConfigError>(o.tile_gemm == "auto" || o.tile_gemm == "micro" || o.tile_gemm == "blas",
                     "--tile-gemm must be auto, micro or blas, got '{}'", o.tile_gemm);
  o.attn.tiles.gemm = o.tile_gemm == "auto"    ? TileGemm::kAuto
                      : o.tile_gemm == "micro" ? TileGemm::kMicroKernel
                                               : TileGemm::kBlas;
  o.attn.variant = parse_attention_variant(o.attention);
  o.attn.precision = training_precision(parse_precision(o.precision), "bench attention: --precision");
  // The model's position names; the layer takes those that act inside
  // attention (sinusoidal and learned positions belong to the embeddings).
  check<ConfigError>(
      o.positions == "none" || o.positions == "relative" || o.positions == "alibi" || o.positions == "rope",
      "--positions must be none, relative, alibi or rope, got '{}'", o.positions);
  o.attn.positions = attention_positions(parse_position_kind(o.positions));
  const AttentionBenchConfig& c = o.attn;
  AttentionBenchResult r = run_attention_bench(c);
  const MachineInfo machine = print_machine();
  fmt::print(
      "MultiheadAttention self-attention B={} L={} E={} H={} {}{}, {}, {}, {} kernel{}, {} GEMM, {} "
      "threads\n",
      c.batch, c.seq_len, c.embed_dim, c.num_heads, c.backward ? "forward+backward" : "forward",
      c.causal ? " causal" : "",
      o.attention + " attention" + (o.positions == "none" ? "" : ", " + o.positions + " positions"),
      precision_name(c.precision), o.impl,
      c.impl == AttentionImpl::kFused
          ? fmt::format(" (tiles {} x {}, {})", c.tiles.q_block, c.tiles.k_block, o.tile_gemm)
          : "",
      o.gemm, r.threads);
  fmt::print("layer:     {:9.3f} ms (median of {})  {:7.1f} GFLOP/s   FLOPs = {}\n", r.ms, c.iters, r.gflops,
             r.flop_formula);
  fmt::print("attention: {:9.3f} ms                {:7.1f} GFLOP/s   (kernel alone, no projections)\n", r.attention_ms,
             r.attention_gflops);
  fmt::print("memory:    peak {} bytes allocated ({} above weights and input), resident growth {} bytes\n",
             r.peak_bytes, r.peak_activation_bytes, r.peak_rss_delta_bytes);
  if (o.json) {
    nlohmann::json j = {{"ms", r.ms},
                        {"gflops", r.gflops},
                        {"flops", r.flops},
                        {"attention_ms", r.attention_ms},
                        {"attention_gflops", r.attention_gflops},
                        {"peak_bytes", r.peak_bytes},
                        {"peak_activation_bytes", r.peak_activation_bytes},
                        {"peak_rss_delta_bytes", r.peak_rss_delta_bytes},
                        {"threads", r.threads},
                        {"gemm", o.gemm},
                        {"samples_ms", r.samples_ms},
                        {"flop_formula", r.flop_formula},
                        {"machine", machine}};
    fmt::print("{}\n", j.dump());
  }
}

void run_gemm(const BenchOpts& o) {
  const Precision precision = parse_precision(o.precision);
  GemmBenchResult r = run_gemm_bench(o.m, o.n, o.k, o.attn.iters, precision);
  const MachineInfo machine = print_machine();
  const bool bf16 = precision == Precision::kBF16, int8 = precision == Precision::kInt8;
  const std::string backend = bf16   ? fmt::format("bf16 operands, {}", bf16_path_name(bf16_path()))
                              : int8 ? fmt::format("oneDNN u8 x s8, {}", int8_path_name())
                                     : o.gemm;
  fmt::print("{} ({}) M={} N={} K={}: {:.3f} ms, {:.1f} G{}/s, {} threads\n",
             bf16   ? "bf16 gemm"
             : int8 ? "int8 linear (x W^T, x quantized each call)"
                    : "sgemm",
             backend, o.m, o.n, o.k, r.ms, r.gflops, int8 ? "OP" : "FLOP", r.threads);
  if (o.json)
    fmt::print("{}\n", nlohmann::json{{"ms", r.ms},
                                      {"gflops", r.gflops},
                                      {"threads", r.threads},
                                      {"gemm", backend},
                                      {"precision", o.precision},
                                      {"machine", machine}}
                           .dump());
}

void run_train(BenchOpts& o) {
  o.train.precision = parse_precision(o.precision);
  o.train = with_pretrained_shape(o.train);
  const TrainBenchConfig& c = o.train;
  TrainBenchResult r = run_train_bench(c);
  if (!process_group().primary()) return;  // under mpirun rank 0 reports
  const MachineInfo machine = print_machine();
  fmt::print(
      "encoder classifier training: d_model={} heads={} layers={} ff={} vocab={} classes={}, batch {} x {} tokens, "
      "dropout {}{}, {} activations, {} parameters, {} GEMM, {} threads{}\n",
      c.d_model, c.num_heads, c.num_layers, c.dim_feedforward, c.vocab_size, c.num_classes, c.batch, c.seq_len,
      c.dropout, c.checkpoint_layers ? ", gradient checkpointing" : "", precision_name(c.precision), r.param_count,
      o.gemm, r.threads, r.ranks > 1 ? fmt::format(" in each of {} ranks (MPI)", r.ranks) : "");
  fmt::print("step: {:.1f} ms (median of {})   {:.0f} tokens/s\n", r.ms, c.iters, r.tokens_per_s);
  if (r.ranks > 1)
    fmt::print("allreduce: {:.2f} ms a step (median), {:.2f} ms of it waited for{}, {:.1f} MiB of gradients a rank\n",
               r.allreduce_ms, r.allreduce_wait_ms, c.allreduce_overlap ? " (the rest beside the backward pass)" : "",
               static_cast<double>(r.allreduce_bytes) / (1 << 20));
  fmt::print("model FLOPs: {:.1f} GFLOP a step, {:.0f} GFLOP/s = {:.0f}% of this machine's sgemm ({:.0f} GFLOP/s)\n",
             r.flops_per_step / 1e9, r.gflops, 100 * r.sgemm_fraction, r.sgemm_gflops);
  fmt::print("parts (median ms): GEMM {:.1f}, attention {:.1f}, optimizer {:.1f}, other {:.1f}\n", r.gemm_ms,
             r.attention_ms, r.optimizer_ms, r.other_ms);
  fmt::print("memory: peak {} bytes allocated ({} above weights, gradients and optimizer state)\n", r.peak_bytes,
             r.peak_activation_bytes);
  if (o.json)
    fmt::print("{}\n", nlohmann::json{{"ms", r.ms},
                                      {"tokens_per_s", r.tokens_per_s},
                                      {"peak_bytes", r.peak_bytes},
                                      {"peak_activation_bytes", r.peak_activation_bytes},
                                      {"param_count", r.param_count},
                                      {"threads", r.threads},
                                      {"ranks", r.ranks},
                                      {"gemm", o.gemm},
                                      {"samples_ms", r.samples_ms},
                                      {"flops_per_step", r.flops_per_step},
                                      {"gflops", r.gflops},
                                      {"sgemm_gflops", r.sgemm_gflops},
                                      {"sgemm_fraction", r.sgemm_fraction},
                                      {"parts_ms",
                                       {{"gemm", r.gemm_ms},
                                        {"attention", r.attention_ms},
                                        {"optimizer", r.optimizer_ms},
                                        {"allreduce", r.allreduce_ms},
                                        {"allreduce_wait", r.allreduce_wait_ms},
                                        {"other", r.other_ms}}},
                                      {"allreduce_bytes", r.allreduce_bytes},
                                      {"machine", machine}}
                           .dump());
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOpts>();
  CLI::App* sub = app.add_subcommand("bench", "Benchmarks: median time, GFLOP/s and peak memory");
  sub->require_subcommand(1);
  CLI::App* attn = sub->add_subcommand("attention", "Self-attention MultiheadAttention layer and its kernel");
  AttentionBenchConfig& c = o->attn;
  attn->add_option("--batch", c.batch, "Batch size")->capture_default_str();
  attn->add_option("--seq-len", c.seq_len, "Sequence length")->capture_default_str();
  attn->add_option("--embed-dim", c.embed_dim, "Embedding size")->capture_default_str();
  attn->add_option("--num-heads", c.num_heads, "Number of heads")->capture_default_str();
  attn->add_flag("--backward", c.backward, "Time forward + backward");
  attn->add_flag("--causal", c.causal, "Causal (top-left) mask");
  attn->add_flag("--need-weights", c.need_weights, "Also return the head-averaged weights");
  attn->add_option("--impl", o->impl, "Attention kernel: fused or reference")->capture_default_str();
  attn->add_option("--q-block", c.tiles.q_block, "Fused kernel: query rows per tile")->capture_default_str();
  attn->add_option("--k-block", c.tiles.k_block, "Fused kernel: key rows per tile")->capture_default_str();
  attn->add_option("--tile-gemm", o->tile_gemm,
                   "Fused kernel: tile products by auto (blas for head_dim <= 8), micro or blas")
      ->capture_default_str();
  attn->add_option("--attention", o->attention, "full, sliding_window, block_sparse or linear")->capture_default_str();
  attn->add_option("--window", c.window, "Sliding window: keys on each side")->capture_default_str();
  attn->add_option("--block-size", c.block_size, "Block-sparse: block size (one neighbour each side)")
      ->capture_default_str();
  attn->add_option("--num-kv-heads", c.num_kv_heads, "Grouped-query attention: key/value heads (0: all)");
  attn->add_option("--positions", o->positions, "Positions in the layer: none, relative (Shaw), alibi or rope")
      ->capture_default_str();
  attn->add_option("--relative-clip", c.relative_clip, "Relative positions: clip distance")->capture_default_str();
  CLI::App* gemm = sub->add_subcommand("gemm", "sgemm through the library's wrapper (the roofline)");
  gemm->add_option("--m", o->m, "Rows of A and C")->capture_default_str();
  gemm->add_option("--n", o->n, "Columns of B and C")->capture_default_str();
  gemm->add_option("--k", o->k, "Columns of A, rows of B")->capture_default_str();
  CLI::App* train = sub->add_subcommand("train", "Training steps of an encoder classifier (AdamW)");
  TrainBenchConfig& t = o->train;
  train->add_option("--d-model", t.d_model, "Model width")->capture_default_str();
  train->add_option("--num-heads", t.num_heads, "Heads per layer")->capture_default_str();
  train->add_option("--num-layers", t.num_layers, "Encoder layers")->capture_default_str();
  train->add_option("--dim-feedforward", t.dim_feedforward, "Feed-forward width")->capture_default_str();
  train->add_option("--seq-len", t.seq_len, "Tokens per sequence")->capture_default_str();
  train->add_option("--batch", t.batch, "Sequences per step")->capture_default_str();
  train->add_option("--vocab-size", t.vocab_size, "Vocabulary size")->capture_default_str();
  train->add_option("--dropout", t.dropout, "Dropout")->capture_default_str();
  train->add_flag("--checkpoint-layers", t.checkpoint_layers, "Gradient checkpointing per layer");
  train
      ->add_option("--pretrained", t.pretrained,
                   "Time this Hugging Face checkpoint's (or run's) model, with its weights; its sizes replace the "
                   "flags above")
      ->check(kNotEmpty);
  train->add_option("--iters", t.iters, "Timed steps")->capture_default_str();
  train->add_option("--warmup", t.warmup, "Untimed steps first")->capture_default_str();
  train
      ->add_option("--allreduce-overlap", t.allreduce_overlap,
                   "Under mpirun, sum each layer's gradients beside the rest of the backward pass")
      ->capture_default_str();
  train->add_flag("--json", o->json, "End with one JSON line of the results");
  for (CLI::App* s : {attn, gemm, train})
    s->add_option("--threads", o->threads, "Threads (0: all cores)")->capture_default_str();
  for (CLI::App* s : {attn, gemm}) {
    s->add_option("--iters", c.iters, "Timed iterations")->capture_default_str();
    s->add_flag("--json", o->json, "End with one JSON line of the results");
  }
  attn->add_option("--warmup", c.warmup, "Untimed iterations first (and, unless 0, at least a second of them)")
      ->capture_default_str();
  for (CLI::App* s : {attn, train})
    s->add_option("--precision", o->precision,
                  fmt::format("Activations and Q, K, V, O in fp32, bf16 or fp16; {}", kPrecisionCompute))
        ->capture_default_str();
  gemm->add_option("--precision", o->precision,
                   "Operands in fp32, or bf16 (fp32 accumulation and result), or int8 (a layer's product: fp32 x "
                   "quantized at each call, the weight once)")
      ->capture_default_str();
  for (CLI::App* s : {attn, gemm, train})
    s->add_option("--gemm", o->gemm, "fp32 GEMM backend: onednn or openblas")->capture_default_str();
  return {sub, [o, attn, train] {
            const ContextScope context(command_context(o->threads, parse_gemm_backend(o->gemm)));
            if (attn->parsed()) run_attention(*o);
            else if (train->parsed()) run_train(*o);
            else run_gemm(*o);
          }};
}

}  // namespace multihead::cli
