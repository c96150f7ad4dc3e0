// SPDX-License-Identifier: Apache-2.0
// Data-parallel training's process group: the ranks `mpirun -np N` started,
// or this process alone.
//
// Built on MPI (Open MPI) when the build has it (MULTIHEAD_MPI). A process
// that mpirun did not start, a build without MPI, and the Python module all
// see a group of one, where every call below returns at once: single-process
// training runs exactly as it would without this file.
//
// Every rank holds the whole model and the same optimizer state; each
// computes the gradients of its share of a step's micro-batches, the
// gradients are summed over the ranks, and every rank then takes the same
// optimizer step (train/trainer.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <thread>

namespace multihead {

// How gradients are summed over the ranks.
enum class Allreduce {
  kMpi,      // MPI_Allreduce: MPI picks the algorithm (ring, recursive doubling)
  kOrdered,  // a fixed-order sum, ((g0 + g1) + g2) + ..., passed rank to rank:
             // the same bits on every run with the same rank count
};
Allreduce parse_allreduce(const std::string& s);  // "mpi" or "ordered"
const char* allreduce_name(Allreduce a);

class ProcessGroup {
 public:
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  bool primary() const noexcept { return rank_ == 0; }  // rank 0 writes the run directory

  // Sums `values` over the ranks in place; every rank gets the same bits.
  void sum(std::span<float> values, Allreduce how = Allreduce::kMpi);
  // Small reductions of per-step figures (losses, counts).
  void sum(std::span<double> values);
  double max(double value);
  // Rank 0's `bytes`, on every rank.
  std::string broadcast(std::string bytes);
  // Fails unless every rank passes the same value: `what` names it in the
  // error (checks that the ranks still hold the same weights, for one).
  void check_same(std::uint64_t value, const char* what);
  // Ends every rank of the group with `code` (MPI_Abort): what a rank does
  // with an error the others cannot know of, so that they do not wait for
  // it forever in a collective.
  [[noreturn]] void abort(int code) noexcept;

  // Seconds spent in sum(std::span<float>) since the last reset, and of
  // those the seconds the training thread waited for (less, when sums ran
  // beside the backward pass: OverlappedSum).
  double reduce_seconds() const noexcept { return reduce_seconds_; }
  double reduce_wait_seconds() const noexcept { return reduce_wait_seconds_; }
  void reset_reduce_seconds() noexcept { reduce_seconds_ = reduce_wait_seconds_ = 0; }
  // Whether MPI lets a second thread make the calls (MPI_THREAD_SERIALIZED).
  bool threaded() const noexcept { return threaded_; }

 private:
  friend class DistributedSession;
  friend class OverlappedSum;
  // sum(); waited: the caller blocked for it (else a thread beside it did).
  void sum_timed(std::span<float> values, Allreduce how, bool waited);
  int rank_ = 0, size_ = 1;
  bool threaded_ = false;
  double reduce_seconds_ = 0, reduce_wait_seconds_ = 0;
};

// Sums of float buffers that run while the caller goes on: start() hands a
// bucket to one communication thread, which sums the buckets over the ranks
// in the order given; wait() returns when every bucket is summed. Every
// rank must start the same buckets in the same order, and the caller must
// make no other call on the group until wait() (MPI_THREAD_SERIALIZED).
// Where MPI has no thread support, start() sums at once.
class OverlappedSum {
 public:
  OverlappedSum(ProcessGroup& group, Allreduce how);
  ~OverlappedSum();  // waits
  OverlappedSum(const OverlappedSum&) = delete;
  OverlappedSum& operator=(const OverlappedSum&) = delete;
  void start(std::span<float> bucket);
  void wait();

 private:
  void run();
  ProcessGroup& group_;
  Allreduce how_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::span<float>> queue_;
  bool closed_ = false;
  std::thread worker_;
};

// The group of the calling thread's context (core/context.h): the CLI's
// MPI session's, or where the context names none, this thread alone.
ProcessGroup& process_group();

// True when this build can train over MPI.
bool mpi_built();
// "Open MPI v4.1.4, ...": the MPI library this build runs on ("" without MPI).
std::string mpi_library();

// MPI for the life of the process: the CLI makes one in main(), before any
// thread starts, and puts its group in the context it runs the command
// under. It initializes MPI only when mpirun (or another MPI launcher)
// started the process; otherwise its group is a group of one. Finalizes on
// destruction.
class DistributedSession {
 public:
  DistributedSession();
  ~DistributedSession();
  DistributedSession(const DistributedSession&) = delete;
  DistributedSession& operator=(const DistributedSession&) = delete;
  ProcessGroup& group() noexcept { return group_; }

 private:
  bool initialized_ = false;
  ProcessGroup group_;
};

}  // namespace multihead
