// SPDX-License-Identifier: Apache-2.0
#include "multihead/train/distributed.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "multihead/core/context.h"
#include "multihead/core/error.h"
#include "multihead/core/suggest.h"

#if MULTIHEAD_HAVE_MPI
#include <mpi.h>
#endif

namespace multihead {

Allreduce parse_allreduce(const std::string& s) {
  if (s == "mpi") return Allreduce::kMpi;
  if (s == "ordered") return Allreduce::kOrdered;
  throw ConfigError(
      fmt::format("allreduce must be mpi or ordered, got '{}'{}", s, did_you_mean(s, {"mpi", "ordered"})));
}

const char* allreduce_name(Allreduce a) { return a == Allreduce::kOrdered ? "ordered" : "mpi"; }

ProcessGroup& process_group() {
  if (ProcessGroup* g = context().group) return *g;
  // This thread alone: a group of one, the thread's own so that its
  // reduction timings (zero) are nobody else's.
  thread_local ProcessGroup alone;
  return alone;
}

bool mpi_built() { return MULTIHEAD_HAVE_MPI != 0; }

namespace {
// Was this process started by an MPI launcher? (Open MPI's mpirun, or a
// PMI/PMIx launcher such as srun.) A plain start does not initialize MPI:
// Open MPI's singleton start would spawn a daemon for nothing.
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}
}  // namespace

#if MULTIHEAD_HAVE_MPI

namespace {

// Gradients go in buckets of at most this many floats (4 MiB): MPI counts
// are ints, and the ordered sum pipelines bucket by bucket.
constexpr std::size_t kPiece = std::size_t{1} << 20;

int piece_count(std::size_t n, std::size_t at) { return static_cast<int>(std::min(kPiece, n - at)); }

// Sums in rank order: rank r receives the sum of ranks 0..r-1, adds its own
// values and passes the result on; the last rank's sum goes to every rank.
// Piece by piece, so rank r adds piece k while rank r-1 sends piece k+1.
void ordered_sum(std::span<float> v, int rank, int size) {
  std::vector<float> incoming(std::min(kPiece, v.size()));
  for (std::size_t at = 0; at < v.size(); at += kPiece) {
    const int n = piece_count(v.size(), at);
    float* own = v.data() + at;
    if (rank > 0) {
      MPI_Recv(incoming.data(), n, MPI_FLOAT, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      for (int i = 0; i < n; ++i) own[i] = incoming[i] + own[i];
    }
    if (rank + 1 < size) MPI_Send(own, n, MPI_FLOAT, rank + 1, 0, MPI_COMM_WORLD);
  }
  for (std::size_t at = 0; at < v.size(); at += kPiece)
    MPI_Bcast(v.data() + at, piece_count(v.size(), at), MPI_FLOAT, size - 1, MPI_COMM_WORLD);
}

}  // namespace

std::string mpi_library() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int n = 0;
  MPI_Get_library_version(text, &n);  // allowed before MPI_Init
  std::string s(text, static_cast<std::size_t>(std::max(n, 0)));
  return s.substr(0, s.find_first_of(",\n"));
}

void ProcessGroup::sum(std::span<float> values, Allreduce how) { sum_timed(values, how, true); }

void ProcessGroup::sum_timed(std::span<float> values, Allreduce how, bool waited) {
  if (size_ == 1 || values.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (how == Allreduce::kOrdered) {
    ordered_sum(values, rank_, size_);
  } else {
    for (std::size_t at = 0; at < values.size(); at += kPiece)
      MPI_Allreduce(MPI_IN_PLACE, values.data() + at, piece_count(values.size(), at), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  reduce_seconds_ += s;
  if (waited) reduce_wait_seconds_ += s;
}

void ProcessGroup::sum(std::span<double> values) {
  if (size_ == 1 || values.empty()) return;
  MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

double ProcessGroup::max(double value) {
  if (size_ > 1) MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return value;
}

std::string ProcessGroup::broadcast(std::string bytes) {
  if (size_ == 1) return bytes;
  std::uint64_t n = bytes.size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  bytes.resize(n);
  for (std::size_t at = 0; at < n; at += kPiece)
    MPI_Bcast(bytes.data() + at, piece_count(n, at), MPI_CHAR, 0, MPI_COMM_WORLD);
  return bytes;
}

void ProcessGroup::check_same(std::uint64_t value, const char* what) {
  if (size_ == 1) return;
  std::uint64_t lo = value, hi = value;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  check<Error>(lo == hi, "the {} ranks disagree on {} (rank {} has {})", size_, what, rank_, value);
}

void ProcessGroup::abort(int code) noexcept {
  if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

DistributedSession::DistributedSession() {
  if (!launched_by_mpi()) return;
  // MPI starts helper threads; they inherit this thread's signal mask, and
  // must not take the SIGINT, SIGTERM and SIGUSR1 the CLI waits for (a
  // signal goes to any thread that does not block it).
  sigset_t stop, old;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  int provided = 0;
  // One thread at a time calls MPI: the main thread, or while it runs the
  // backward pass, the gradient sums' thread (OverlappedSum).
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  check<Error>(rc == MPI_SUCCESS, "MPI_Init_thread failed ({})", rc);
  initialized_ = true;
  ProcessGroup& g = group_;
  g.threaded_ = provided >= MPI_THREAD_SERIALIZED;
  MPI_Comm_rank(MPI_COMM_WORLD, &g.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &g.size_);
}

DistributedSession::~DistributedSession() {
  if (initialized_) MPI_Finalize();
}

#else  // a build without MPI: a group of one

std::string mpi_library() { return ""; }
void ProcessGroup::sum(std::span<float>, Allreduce) {}
void ProcessGroup::sum_timed(std::span<float>, Allreduce, bool) {}
void ProcessGroup::sum(std::span<double>) {}
double ProcessGroup::max(double value) { return value; }
std::string ProcessGroup::broadcast(std::string bytes) { return bytes; }
void ProcessGroup::check_same(std::uint64_t, const char*) {}
void ProcessGroup::abort(int code) noexcept { std::_Exit(code); }
// Several copies of this process would each train alone and write the same
// run directory: refused.
DistributedSession::DistributedSession() {
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  check<Error>(!launched_by_mpi() || (n != nullptr && std::string(n) == "1"),
               "started by an MPI launcher, but this build has no MPI: configure with libopenmpi-dev installed "
               "(-DMULTIHEAD_MPI=ON)");
}
DistributedSession::~DistributedSession() = default;

#endif

// Not MPI itself: a build without MPI has a group of one, and start() sums
// (nothing) at once.
OverlappedSum::OverlappedSum(ProcessGroup& group, Allreduce how) : group_(group), how_(how) {
  if (group_.size() > 1 && group_.threaded()) worker_ = std::thread([this] { run(); });
}

OverlappedSum::~OverlappedSum() { wait(); }

void OverlappedSum::start(std::span<float> bucket) {
  if (!worker_.joinable()) {
    group_.sum(bucket, how_);
    return;
  }
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(bucket);
  }
  ready_.notify_one();
}

void OverlappedSum::wait() {
  if (!worker_.joinable()) return;
  const auto t0 = std::chrono::steady_clock::now();
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  ready_.notify_one();
  worker_.join();
  group_.reduce_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void OverlappedSum::run() {
  for (;;) {
    std::span<float> bucket;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return closed_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closed, and all summed
      bucket = queue_.front();
      queue_.pop_front();
    }
    // Adds to reduce_seconds_, which only this thread writes until wait() joins it.
    group_.sum_timed(bucket, how_, false);
  }
}

}  // namespace multihead
