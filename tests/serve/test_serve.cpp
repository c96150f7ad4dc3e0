// SPDX-License-Identifier: Apache-2.0
// multihead serve, as its clients see it: the binary started on a free
// loopback port and spoken to over HTTP (cpp-httplib's client, and raw
// sockets for what no well-behaved client sends).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "multihead/data/cmudict.h"
#include "multihead/serve/server.h"

namespace multihead::test {
namespace {

using nlohmann::json;

// The server as a child process: its URL from its first line of output.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& args) {
    int out[2];
    EXPECT_EQ(::pipe(out), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      // A test process that dies (a failed assertion under a sanitizer) takes
      // its server along instead of leaving it holding ctest's output pipe.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(out[1], 1);
      ::close(out[0]);
      std::vector<std::string> all = {cli_path(), "serve"};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_ = out[0];
    const std::string first = read_line();
    const auto at = first.find("http://127.0.0.1:");
    if (at == std::string::npos) {
      ADD_FAILURE() << "no address in '" << first << "'";
      return;
    }
    port = std::stoi(first.substr(at + 17));
  }
  ~ServerProcess() {
    if (pid_ > 0) stop();
    ::close(out_);
  }
  // SIGTERM; the exit code, and what it printed after its first line.
  std::pair<int, std::string> stop() {
    ::kill(pid_, SIGTERM);
    std::string rest;
    char buf[4096];
    for (ssize_t n; (n = ::read(out_, buf, sizeof buf)) > 0;) rest.append(buf, static_cast<std::size_t>(n));
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, rest};
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  }
  int port = 0;

 private:
  std::string read_line() {
    std::string line;
    char ch;
    pollfd p{out_, POLLIN, 0};
    while (::poll(&p, 1, 60000) > 0 && ::read(out_, &ch, 1) == 1 && ch != '\n') line += ch;
    return line;
  }
  pid_t pid_ = -1;
  int out_ = -1;
};

json post_to(httplib::Client& c, const std::string& path, const json& body, int* status = nullptr) {
  auto r = c.Post(path, body.dump(), "application/json");
  if (!r) {
    ADD_FAILURE() << "no response: " << httplib::to_string(r.error());
    return {};
  }
  if (status) *status = r->status;
  else EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

json post(httplib::Client& c, const json& body, int* status = nullptr) {
  return post_to(c, "/v1/predict", body, status);
}

json get(httplib::Client& c, const std::string& path) {
  auto r = c.Get(path.c_str());
  if (!r) return {};
  EXPECT_EQ(r->status, 200);
  return json::parse(r->body);
}

// predict --json's answers, without their line numbers.
std::vector<json> predict_json(const fs::path& run_dir, const fs::path& items, const std::string& flags) {
  CliRun p = run("predict --run " + run_dir.string() + " --json --threads 1 --input " + items.string() + " " + flags);
  EXPECT_EQ(p.code, 0) << p.err;
  std::vector<json> out;
  std::istringstream lines(p.out);
  for (std::string line; std::getline(lines, line);) {
    json j = json::parse(line);
    j.erase("line");
    out.push_back(j);
  }
  return out;
}

// A raw connection, for requests no HTTP client library would send; from
// another loopback address than 127.0.0.1 when `from` names one (Linux routes
// all of 127/8 to the loopback device), to stand for another machine.
int connect_to(int port, const char* from = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (from) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    EXPECT_EQ(::inet_pton(AF_INET, from, &local.sin_addr), 1);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local), 0) << std::strerror(errno);
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  return fd;
}

// Closes a raw connection with a reset (SO_LINGER 0), as a killed client's
// kernel or one that gives up abruptly does.
void reset(int fd) {
  const linger abort_close{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_close, sizeof abort_close);
  ::close(fd);
}

// Everything a raw connection receives until the server closes it or
// `timeout` passes without a byte.
std::string read_all(int fd, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string got;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<std::size_t>(n));
  return got;
}

void expect_near_answers(const json& got, const json& want) {
  ASSERT_EQ(got["input"], want["input"]);
  if (want.contains("label")) {
    EXPECT_EQ(got["label"], want["label"]);
    for (const auto& [label, p] : want["probabilities"].items())
      EXPECT_NEAR(got["probabilities"][label].get<double>(), p.get<double>(), 1e-6) << label;
  } else if (want.contains("pronunciations")) {
    ASSERT_EQ(got["pronunciations"].size(), want["pronunciations"].size());
    for (std::size_t i = 0; i < want["pronunciations"].size(); ++i) {
      EXPECT_EQ(got["pronunciations"][i]["phonemes"], want["pronunciations"][i]["phonemes"]);
      EXPECT_NEAR(got["pronunciations"][i]["score"].get<double>(), want["pronunciations"][i]["score"].get<double>(),
                  1e-5);
    }
  } else {
    EXPECT_EQ(got, want);
  }
}

class Serve : public ScratchFolder {
 protected:
  Serve() : ScratchFolder("serve", true) {}

  fs::path classifier() {
    write_sentiment_csv(dir / "tiny.csv", 12);
    return train("train --source csv --tokenizer word --vocab-size 64 --epochs 3 --max-len 8 --data " +
                     (dir / "tiny.csv").string(),
                 "spam");
  }
  fs::path language_model() {
    std::ofstream f(dir / "tiny.txt");
    for (int i = 0; i < 60; ++i) f << "the whale swam on. the sea was calm.\n";
    f.close();
    return train("train --preset moby-dick --steps 30 --max-len 16 --data " + (dir / "tiny.txt").string(), "lm");
  }
  fs::path pronunciation() {
    std::ofstream(dir / "dict.txt") << regular_spelling_dictionary(150);
    return train("train --preset cmudict --epochs 2 --batch 16 --data " + (dir / "dict.txt").string(), "words");
  }
  fs::path items(const std::vector<std::string>& lines) {
    const fs::path p = dir / ("items" + std::to_string(++items_) + ".txt");
    std::ofstream f(p);
    for (const auto& l : lines) f << l << "\n";
    return p;
  }

 private:
  fs::path train(const std::string& args, const std::string& name) {
    CliRun r =
        run(args + " --d-model 16 --num-heads 2 --num-layers 1 --threads 1 --quiet --out " + (dir / name).string());
    EXPECT_EQ(r.code, 0) << r.err;
    return dir / name;
  }
  int items_ = 0;
};

TEST_F(Serve, ClassifierAnswersAsPredictJsonDoes) {
  const fs::path run_dir = classifier();
  const std::vector<std::string> texts = {"good great fine", "bad awful poor", "nice day", "poor good"};
  const std::vector<json> want = predict_json(run_dir, items(texts), "");
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1"});
  auto c = server.client();
  const json got = post(c, {{"inputs", texts}});
  ASSERT_EQ(got["outputs"].size(), texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) expect_near_answers(got["outputs"][i], want[i]);
  // A threshold of 0: the positive (second) class, neg, for every input.
  const json at_zero = post(c, {{"inputs", texts}, {"threshold", 0}});
  for (const json& a : at_zero["outputs"]) EXPECT_EQ(a["label"], "neg") << a;
  const json model = get(c, "/v1/model");
  EXPECT_EQ(model["task"], "text_classification");
  EXPECT_EQ(model["labels"], json({"pos", "neg"}));  // as the data named them, in its order
  EXPECT_EQ(model["config"]["max_len"], 8);
  EXPECT_NE(model["machine"].get<std::string>().find("1 thread"), std::string::npos) << model["machine"];
  // POST /v1/embed: the sentence embeddings `multihead embed --json` gives, in the order asked.
  CliRun e = run("embed --run " + run_dir.string() + " --json --threads 1 --input " + items(texts).string());
  ASSERT_EQ(e.code, 0) << e.err;
  std::istringstream lines(e.out);
  int status = 0;
  const json embedded = post_to(c, "/v1/embed", {{"inputs", texts}}, &status);
  ASSERT_EQ(status, 200) << embedded;
  ASSERT_EQ(embedded["outputs"].size(), texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    std::string line;
    std::getline(lines, line);
    const json from_cli = json::parse(line)["embedding"];
    const json& served = embedded["outputs"][i]["embedding"];
    ASSERT_EQ(served.size(), from_cli.size());
    for (std::size_t k = 0; k < from_cli.size(); ++k)
      EXPECT_NEAR(served[k].get<double>(), from_cli[k].get<double>(), 1e-5);
  }
  // An embedding takes no settings.
  post_to(c, "/v1/embed", {{"inputs", texts}, {"tokens", 3}}, &status);
  EXPECT_EQ(status, 400);
  const json health = get(c, "/v1/health");
  EXPECT_EQ(health["status"], "ok");
  EXPECT_EQ(health["answered"], 3);
  EXPECT_EQ(health["inputs"], 12);
  EXPECT_EQ(health["model_threads"], 1);  // --threads reaches the thread that runs the model
  const auto [code, rest] = server.stop();
  EXPECT_EQ(code, 0);
  EXPECT_NE(rest.find("stopped after 4 requests (3 answered, 1 refused"), std::string::npos) << rest;  // the bad embed
}

// The samples of a Prometheus text exposition (format 0.0.4), checked line
// by line as a scraper reads them: HELP and TYPE before a family's samples,
// each sample `name{label="value",...} number`, a histogram's buckets
// cumulative with +Inf equal to its _count. Keyed by the line's name and labels.
std::map<std::string, double> parse_exposition(const std::string& text) {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)"),
      type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*",?)*\})? (-?[0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?|\+Inf|NaN))");
  std::istringstream lines(text);
  std::map<std::string, double> last_bucket;
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, help)) continue;
    if (std::regex_match(line, m, type)) {
      EXPECT_FALSE(types.count(m[1])) << "a second TYPE for " << m[1];
      types[m[1]] = m[2];
      continue;
    }
    if (!std::regex_match(line, m, sample)) {
      ADD_FAILURE() << "not a sample line: '" << line << "'";
      continue;
    }
    std::string family = m[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!types.count(family) && family.ends_with(suffix) &&
          types.count(family.substr(0, family.size() - std::strlen(suffix))))
        family = family.substr(0, family.size() - std::strlen(suffix));
    EXPECT_TRUE(types.count(family)) << "no TYPE before " << line;
    const double v = std::stod(m[3]);
    samples[std::string(m[1]) + std::string(m[2])] = v;
    if (std::string(m[1]).ends_with("_bucket")) {
      // The series without its le label: buckets of one series come in order, each >= the one before.
      const std::string labels = std::regex_replace(std::string(m[2]), std::regex(R"(,?le="[^"]*")"), "");
      const std::string key = std::string(m[1]) + labels;
      EXPECT_GE(v, last_bucket[key]) << line;
      last_bucket[key] = v;
    }
  }
  for (const auto& [name, t] : types)
    if (t == "histogram")
      for (const auto& [key, v] : samples)
        if (key.rfind(name + "_count", 0) == 0) {
          std::string labels = key.substr(name.size() + 6);
          const std::string inf =
              labels.empty() ? "{le=\"+Inf\"}" : labels.substr(0, labels.size() - 1) + ",le=\"+Inf\"}";
          EXPECT_EQ(samples[name + "_bucket" + inf], v) << name << labels;
        }
  return samples;
}

TEST_F(Serve, MetricsRequestIdsAndLongInputsAsPredictReadsThem) {
  const fs::path run_dir = classifier();
  // 6,000 bytes: past the old 4 KiB cap, and far more tokens than the model's 8.
  std::string long_text;
  for (int i = 0; i < 600; ++i) long_text += i % 2 ? "good fine " : "bad awful ";
  const std::vector<json> want = predict_json(run_dir, items({long_text, "good"}), "");
  ASSERT_EQ(want.size(), 2u);
  EXPECT_EQ(want[0]["truncated"], true);
  EXPECT_FALSE(want[1].contains("truncated"));
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1"});
  auto c = server.client();
  // One connection for every request, so that the open-connections gauge has one right value: a
  // connection per request would leave the server to notice each close in its own time.
  c.set_keep_alive(true);
  const json got = post(c, {{"inputs", {long_text, "good"}}});
  expect_near_answers(got["outputs"][0], want[0]);
  EXPECT_EQ(got["outputs"][0]["truncated"], true);
  post(c, {{"inputs", {"bad"}}});
  // Request ids: the client's own, else a new one for each answer.
  auto own = c.Post("/v1/predict", httplib::Headers{{"X-Request-Id", "trace-42"}}, R"({"inputs": ["fine"]})",
                    "application/json");
  ASSERT_TRUE(own);
  EXPECT_EQ(own->get_header_value("X-Request-Id"), "trace-42");
  auto a = c.Get("/v1/health"), b = c.Get("/nowhere");
  auto odd = c.Get("/v1/health", httplib::Headers{{"X-Request-Id", std::string(200, 'x')}});
  ASSERT_TRUE(a && b && odd);
  const std::regex server_id("[0-9a-f]{8}-[0-9]+");
  EXPECT_TRUE(std::regex_match(a->get_header_value("X-Request-Id"), server_id)) << a->get_header_value("X-Request-Id");
  EXPECT_TRUE(std::regex_match(odd->get_header_value("X-Request-Id"), server_id));  // too long: replaced
  EXPECT_NE(a->get_header_value("X-Request-Id"), b->get_header_value("X-Request-Id"));
  EXPECT_EQ(b->status, 404);

  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(m->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::map<std::string, double> s = parse_exposition(m->body);
  EXPECT_EQ(s.at(R"(multihead_http_requests_total{endpoint="/v1/predict",code="200"})"), 3);
  EXPECT_EQ(s.at(R"(multihead_http_requests_total{endpoint="/v1/health",code="200"})"), 2);
  EXPECT_EQ(s.at(R"(multihead_http_requests_total{endpoint="other",code="404"})"), 1);  // no label per path
  EXPECT_EQ(s.at(R"(multihead_http_request_duration_seconds_count{endpoint="/v1/predict"})"), 3);
  EXPECT_GT(s.at(R"(multihead_http_request_duration_seconds_sum{endpoint="/v1/predict"})"), 0);
  EXPECT_EQ(s.at("multihead_batch_inputs_count"), 3);  // one model call a request, one at a time
  EXPECT_EQ(s.at("multihead_batch_inputs_sum"), 4);
  EXPECT_EQ(s.at(R"(multihead_batch_inputs_bucket{le="1"})"), 2);
  EXPECT_EQ(s.at(R"(multihead_batch_inputs_bucket{le="2"})"), 3);
  EXPECT_EQ(s.at("multihead_inputs_truncated_total"), 1);
  EXPECT_EQ(s.at("multihead_queue_requests"), 0);
  EXPECT_EQ(s.at("multihead_connections_open"), 1);
  EXPECT_EQ(s.at("multihead_bad_requests_total"), 1);
  // A POST to it is refused as for any GET endpoint.
  auto post_metrics = c.Post("/metrics", "", "text/plain");
  ASSERT_TRUE(post_metrics);
  EXPECT_EQ(post_metrics->status, 405);
}

TEST_F(Serve, LanguageModelTakesGenerationSettings) {
  const fs::path run_dir = language_model();
  const std::vector<std::string> prompts = {"the wh", "the se"};
  const fs::path in = items(prompts);
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1", "--tokens", "7"});
  auto c = server.client();
  // The server's default length, then a request's own settings.
  const std::vector<json> greedy = predict_json(run_dir, in, "--tokens 7 --temperature 0");
  const json got = post(c, {{"inputs", prompts}, {"temperature", 0}});
  for (std::size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got["outputs"][i], greedy[i]);
  EXPECT_EQ(got["outputs"][0]["output"].get<std::string>().size(), 6u + 7u);
  const std::vector<json> sampled = predict_json(run_dir, in, "--tokens 12 --temperature 1.5 --top-k 5 --seed 3");
  const json s = post(c, {{"inputs", prompts}, {"tokens", 12}, {"temperature", 1.5}, {"top_k", 5}, {"seed", 3}});
  for (std::size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(s["outputs"][i], sampled[i]);
  // A language model is no text encoder: /v1/embed says so, and serving goes on.
  int status = 0;
  const json refused = post_to(c, "/v1/embed", {{"inputs", prompts}}, &status);
  EXPECT_EQ(status, 404);
  EXPECT_NE(refused["error"].get<std::string>().find("text encoders"), std::string::npos) << refused;
  EXPECT_EQ(post(c, {{"inputs", prompts}, {"temperature", 0}}), got);
}

TEST_F(Serve, PronunciationGivesNBest) {
  const fs::path run_dir = pronunciation();
  const std::vector<std::string> words = {"abcd", "FEED", "bead"};
  const std::vector<json> want = predict_json(run_dir, items(words), "--n-best 2");
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1"});
  auto c = server.client();
  const json got = post(c, {{"inputs", words}, {"n_best", 2}});
  ASSERT_EQ(got["outputs"].size(), words.size());
  for (std::size_t i = 0; i < words.size(); ++i) expect_near_answers(got["outputs"][i], want[i]);
  // A word the model cannot read fails its own request, named by its place; the next is served.
  int status = 0;
  const json bad = post(c, {{"inputs", {"abc", std::string(200, 'A')}}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(bad["error"].get<std::string>().rfind("inputs[1]: '", 0), 0u) << bad;
  EXPECT_NE(bad["error"].get<std::string>().find("has 200 letters"), std::string::npos) << bad;
  EXPECT_EQ(post(c, {{"inputs", {"abc"}}})["outputs"].size(), 1u);
}

// 64 clients with 50 requests each, all at once, half of them on one
// keep-alive connection each and half on a new connection a request: every
// answer is the one the same input gets alone, and requests were batched together.
TEST_F(Serve, ConcurrentClientsAreBatchedAndAnsweredAlike) {
  const fs::path run_dir = classifier();
  const std::vector<std::string> texts = {"good great fine", "bad awful poor", "nice day", "poor good", "fine",
                                          "awful nasty bad", "great great",    "day"};
  const std::vector<json> want = predict_json(run_dir, items(texts), "");
  ServerProcess server(
      {"--run", run_dir.string(), "--port", "0", "--threads", "1", "--max-batch", "16", "--max-wait-ms", "5"});
  constexpr int kClients = 64, kRequests = 50;
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  for (int k = 0; k < kClients; ++k)
    clients.emplace_back([&, k] {
      auto c = server.client();
      c.set_keep_alive(k % 2 == 0);
      for (int r = 0; r < kRequests; ++r) {
        const std::size_t a = static_cast<std::size_t>(k + r) % texts.size(),
                          b = static_cast<std::size_t>(k * 3 + r) % texts.size();
        auto res = c.Post("/v1/predict", json{{"inputs", {texts[a], texts[b]}}}.dump(), "application/json");
        std::string why;
        if (!res) why = "no response: " + httplib::to_string(res.error());
        else if (res->status != 200) why = res->body;
        else {
          const json got = json::parse(res->body)["outputs"];
          for (int i = 0; i < 2; ++i) {
            const json& w = want[i == 0 ? a : b];
            if (got[i]["label"] != w["label"] ||
                std::abs(got[i]["probabilities"]["pos"].get<double>() - w["probabilities"]["pos"].get<double>()) > 1e-6)
              why = "answer " + got[i].dump() + " differs from " + w.dump();
          }
        }
        if (why.empty()) ++ok;
        else {
          std::lock_guard lock(failures_mutex);
          failures.push_back(why);
        }
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), kClients * kRequests) << (failures.empty() ? "" : failures.front());
  auto c = server.client();
  const json health = get(c, "/v1/health");
  EXPECT_EQ(health["answered"], kClients * kRequests);
  EXPECT_EQ(health["inputs"], 2 * kClients * kRequests);
  EXPECT_LT(health["batches"].get<int>(), kClients * kRequests);  // batched: fewer model calls than requests
}

TEST_F(Serve, BadRequestsGetJsonErrorsAndServingGoesOn) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1", "--max-inputs", "4",
                        "--max-input-bytes", "64", "--max-body-bytes", "1024"});
  auto c = server.client();
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"{\"inputs\": [\"good\"", 400, "the body is not valid JSON"},
      {"[\"good\"]", 400, "the body must be a JSON object, got array"},
      {"{\"inputs\": \"good\"}", 400, "'inputs' must be an array of strings, got string"},
      {"{\"inputs\": [\"good\", 3]}", 400, "inputs[1] must be a string, got number"},
      {"{\"inputs\": []}", 400, "'inputs' is empty"},
      {"{\"texts\": [\"good\"]}", 400, "unknown field 'texts'"},
      {"{\"inputs\": [\"good\"], \"mode\": 1}", 400, "unknown field 'mode'"},
      {"{\"inputs\": [\"good\"], \"tokens\": 5}", 400, "'tokens' does not apply to text_classification runs"},
      {"{\"inputs\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", 400, "'inputs' has 5 items; at most 4"},
      {json{{"inputs", {std::string(65, 'x')}}}.dump(), 400, "inputs[0] is 65 bytes long; at most 64"},
      {json{{"inputs", {std::string(60, 'x')}}, {"pad", std::string(2000, ' ')}}.dump(), 413,
       "the body is larger than 1024 bytes"},
  };
  for (const auto& [body, status, error] : cases) {
    auto r = c.Post("/v1/predict", body, "application/json");
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, status) << body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    EXPECT_NE(json::parse(r->body)["error"].get<std::string>().find(error), std::string::npos) << r->body;
  }
  auto missing = c.Get("/v1/classify");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["error"], "no such endpoint: GET /v1/classify");
  auto method = c.Get("/v1/predict");
  ASSERT_TRUE(method);
  EXPECT_EQ(method->status, 405);
  EXPECT_EQ(method->get_header_value("Allow"), "POST");
  // Not HTTP at all, on a connection of its own.
  const int fd = connect_to(server.port);
  const std::string junk = "HELLO\r\n\r\n";
  ASSERT_EQ(::send(fd, junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));
  std::string reply;
  char buf[1024];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply;
  EXPECT_NE(reply.find("{\"error\":"), std::string::npos) << reply;
  // Still serving.
  EXPECT_EQ(post(c, {{"inputs", {"good"}}})["outputs"].size(), 1u);
  const json health = get(c, "/v1/health");
  EXPECT_EQ(health["bad_requests"].get<int>(), static_cast<int>(cases.size()) + 2);
  // One source for every count: /metrics, /v1/health and the closing line
  // agree (the closing line said "0 refused" where /metrics counted them).
  const auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(parse_exposition(m->body).at("multihead_bad_requests_total"), health["bad_requests"].get<double>());
  EXPECT_GE(health["refused"].get<int>(), health["bad_requests"].get<int>());
  const auto [code, rest] = server.stop();
  EXPECT_EQ(code, 0);
  EXPECT_NE(rest.find(fmt::format("stopped after {} requests ({} answered, {} refused, 0 dropped",
                                  health["requests"].get<int>(), health["answered"].get<int>(),
                                  health["refused"].get<int>())),
            std::string::npos)
      << rest << health;
}

// Clients that send their request a byte at a time each hold a connection
// thread, never the model: the others are served meanwhile.
TEST_F(Serve, SlowClientsDoNotHoldUpOthers) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1", "--connections", "8"});
  std::atomic<bool> done{false};
  std::atomic<int> slow_bytes{0};
  std::vector<std::thread> slow;
  for (int k = 0; k < 4; ++k)
    slow.emplace_back([&] {
      const int fd = connect_to(server.port);
      const std::string request =
          "POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 22\r\n\r\n{\"inputs\": [\"good\"]}";
      for (std::size_t i = 0; i < request.size() && !done; ++i) {
        ::send(fd, &request[i], 1, MSG_NOSIGNAL);
        ++slow_bytes;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      ::close(fd);
    });
  while (slow_bytes < 8) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto c = server.client();
  for (int r = 0; r < 20; ++r) EXPECT_EQ(post(c, {{"inputs", {"good"}}})["outputs"].size(), 1u);
  EXPECT_LT(slow_bytes.load(), 4 * 60);  // the slow requests were still coming in
  done = true;
  for (auto& t : slow) t.join();
}

// Requests whose clients reset their connections while a long one runs are
// dropped, never run; SIGTERM lets the request in flight finish and be answered.
TEST_F(Serve, GoneClientsAreDroppedAndStopAnswersInFlight) {
  const fs::path run_dir = language_model();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1", "--max-batch", "1"});
  // About 65 000 tokens: long enough for the rest of the test to happen meanwhile.
  const json long_request = {{"inputs", std::vector<std::string>(64, "the whale")}, {"tokens", 1024}};
  int long_status = 0;
  json long_answer;
  std::thread first([&] {
    auto c = server.client();
    long_answer = post(c, long_request, &long_status);
  });
  auto c = server.client();
  while (get(c, "/v1/health")["requests"] != 1 || get(c, "/v1/health")["queued"] != 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::string body = json{{"inputs", {"the sea"}}, {"tokens", 5}}.dump();
  const std::string request =
      "POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  for (int k = 0; k < 5; ++k) {
    const int fd = connect_to(server.port);
    ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    reset(fd);
  }
  while (get(c, "/v1/health")["requests"] != 6) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the connection threads see the hang-ups
  const auto [code, rest] = server.stop();                      // while the long request runs
  first.join();
  EXPECT_EQ(code, 0);
  EXPECT_EQ(long_status, 200);
  EXPECT_EQ(long_answer["outputs"].size(), 64u);
  EXPECT_NE(rest.find("stopped after 6 requests (1 answered, 0 refused, 5 dropped"), std::string::npos) << rest;
}

// A client that shuts down its sending side after its request (nc -N,
// shutdown(SHUT_WR)) is answered: a half-closed connection still reads.
TEST_F(Serve, HalfClosedClientsAreAnswered) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1"});
  const std::string body = json{{"inputs", {"good great fine"}}}.dump();
  const std::string request =
      "POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = connect_to(server.port);
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  ::shutdown(fd, SHUT_WR);
  const std::string got = read_all(fd);
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("{\"outputs\":[{\"input\":\"good great fine\",\"label\":"), std::string::npos) << got;
  auto c = server.client();
  EXPECT_EQ(get(c, "/v1/health")["answered"], 1);
}

// A chunked body counts against --max-body-bytes as a Content-Length one
// does: 413 once the limit is passed, and the rest is never read.
TEST_F(Serve, ChunkedBodiesCountAgainstTheLimit) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1", "--max-body-bytes", "4096"});
  const int fd = connect_to(server.port);
  const std::string head = "POST /v1/predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  const std::string chunk = "400\r\n" + std::string(1024, ' ') + "\r\n";
  std::size_t sent = 0;
  for (int k = 0; k < 4096; ++k) {  // 4 MB offered; the server stops reading after 4 KB
    if (::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(chunk.size())) break;
    sent += 1024;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) break;  // answered
  }
  const std::string got = read_all(fd);
  reset(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 413 ", 0), 0u) << got.substr(0, 200);
  EXPECT_NE(got.find("the body is larger than 4096 bytes"), std::string::npos) << got.substr(0, 400);
  EXPECT_LT(sent, std::size_t{4096} * 1024);
  // A chunked body within the limit is answered.
  const std::string body = json{{"inputs", {"good"}}}.dump();
  const std::string ok =
      "POST /v1/predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
      fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", body.size(), body);
  const int fd2 = connect_to(server.port);
  ASSERT_EQ(::send(fd2, ok.data(), ok.size(), 0), static_cast<ssize_t>(ok.size()));
  const std::string answer = read_all(fd2);
  ::close(fd2);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer;
}

// A raw POST /v1/predict of `body`, as bytes.
std::string raw_predict(const std::string& body, const std::string& extra_headers = "") {
  return "POST /v1/predict HTTP/1.1\r\nHost: x\r\n" + extra_headers + "Content-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

// Requests sent back to back on one connection, before any answer, are
// answered in order.
TEST_F(Serve, PipelinedRequestsAreAnsweredInOrder) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1"});
  const std::string requests =
      raw_predict(json{{"inputs", {"good great fine"}}}.dump(), "X-Request-Id: first\r\n") +
      "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n" +
      raw_predict(json{{"inputs", {"bad awful poor"}}}.dump(), "Connection: close\r\nX-Request-Id: third\r\n");
  const int fd = connect_to(server.port);
  ASSERT_EQ(::send(fd, requests.data(), requests.size(), 0), static_cast<ssize_t>(requests.size()));
  const std::string got = read_all(fd);
  ::close(fd);
  const std::size_t first = got.find("\"input\":\"good great fine\""), health = got.find("\"status\":\"ok\""),
                    last = got.find("\"input\":\"bad awful poor\"");
  ASSERT_NE(first, std::string::npos) << got;
  ASSERT_NE(health, std::string::npos) << got;
  ASSERT_NE(last, std::string::npos) << got;
  EXPECT_LT(first, health);
  EXPECT_LT(health, last);
  std::size_t answers = 0;
  for (std::size_t at = 0; (at = got.find("HTTP/1.1 200 OK\r\n", at)) != std::string::npos; ++at) ++answers;
  EXPECT_EQ(answers, 3u) << got;
  // Each answer carries its own request's id, in order; the one that brought none gets the server's.
  const std::size_t id1 = got.find("X-Request-Id: first\r\n"), id3 = got.find("X-Request-Id: third\r\n");
  ASSERT_NE(id1, std::string::npos) << got;
  ASSERT_NE(id3, std::string::npos) << got;
  EXPECT_LT(id1, first);
  EXPECT_LT(health, id3);
  const std::size_t id2 = got.find("X-Request-Id: ", id1 + 1);
  EXPECT_LT(id2, id3);
  EXPECT_TRUE(
      std::regex_match(got.substr(id2 + 14, got.find("\r\n", id2) - id2 - 14), std::regex("[0-9a-f]{8}-[0-9]+")));
}

// A client that sends Expect: 100-continue (curl does for bodies past 1 KiB)
// is told to go on at once instead of waiting out its own timeout.
TEST_F(Serve, ExpectContinueIsAnswered) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1"});
  const std::string body = json{{"inputs", {"good"}}}.dump();
  const std::string head =
      "POST /v1/predict HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nConnection: close\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n";
  const int fd = connect_to(server.port);
  ASSERT_EQ(::send(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  char buf[256];
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_EQ(::send(fd, body.data(), body.size(), 0), static_cast<ssize_t>(body.size()));
  const std::string got = read_all(fd);
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
}

// A normal request is answered within a second while a thousand idle
// connections and a hundred clients dripping a header byte every 100 ms
// are connected: none of them holds a thread.
TEST_F(Serve, IdleAndSlowClientsDoNotStarveOthers) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1", "--idle-timeout-ms", "30000",
                        "--request-timeout-ms", "30000"});
  std::vector<int> idle, slow;
  for (int k = 0; k < 1000; ++k) idle.push_back(connect_to(server.port));
  for (int k = 0; k < 100; ++k) slow.push_back(connect_to(server.port));
  const std::string drip = "POST /v1/predict HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(64, 'z');
  std::atomic<bool> done{false};
  std::thread dripper([&] {
    for (std::size_t i = 0; i < drip.size() && !done; ++i) {
      for (int fd : slow) ::send(fd, &drip[i], 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // every connection accepted and waiting
  for (int r = 0; r < 5; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const int fd = connect_to(server.port);
    const std::string request = raw_predict(json{{"inputs", {"good"}}}.dump(), "Connection: close\r\n");
    ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    const std::string got = read_all(fd);
    ::close(fd);
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
    EXPECT_LT(took, std::chrono::seconds(1));
  }
  done = true;
  dripper.join();
  for (int fd : idle) ::close(fd);
  for (int fd : slow) ::close(fd);
}

// Every wait has a deadline: a connection with no request is closed after
// --idle-timeout-ms, and a request whose header drips in past
// --request-timeout-ms is dropped, however often a byte comes.
TEST_F(Serve, IdleAndDrippingConnectionsAreClosedOnTime) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1", "--idle-timeout-ms", "300",
                        "--request-timeout-ms", "500"});
  const auto start = std::chrono::steady_clock::now();
  const int idle = connect_to(server.port);
  EXPECT_EQ(read_all(idle), "");  // closed by the server
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2000));
  ::close(idle);
  const int slow = connect_to(server.port);
  const std::string drip = "POST /v1/predict HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(100, 'z');
  std::size_t sent = 0;
  const auto drip_start = std::chrono::steady_clock::now();
  for (; sent < drip.size(); ++sent) {
    if (::send(slow, &drip[sent], 1, MSG_NOSIGNAL) != 1) break;
    pollfd p{slow, POLLIN, 50};
    if (::poll(&p, 1, 50) > 0) break;  // closed
  }
  const auto dripped = std::chrono::steady_clock::now() - drip_start;
  ::close(slow);
  EXPECT_LT(sent, drip.size());
  EXPECT_GE(dripped, std::chrono::milliseconds(400));
  EXPECT_LT(dripped, std::chrono::milliseconds(2000));
}

// Malformed framing is answered at once and the connection closed: a
// negative Content-Length is not "too large" after a timeout, and a
// malformed request line's connection does not stay open.
TEST_F(Serve, MalformedFramingIsAnsweredAtOnceAndClosed) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1"});
  for (const std::string& bad : {std::string("POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n"),
                                 std::string("GARBAGE / NOT-HTTP\r\n\r\n")}) {
    const auto start = std::chrono::steady_clock::now();
    const int fd = connect_to(server.port);
    ASSERT_EQ(::send(fd, bad.data(), bad.size(), 0), static_cast<ssize_t>(bad.size()));
    const std::string got = read_all(fd);  // to the server's close
    ::close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << got;
    EXPECT_NE(got.find("the request is not valid HTTP"), std::string::npos) << got;
    EXPECT_NE(got.find("\r\nX-Request-Id: "), std::string::npos) << got;  // refused before a header: the server's id
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000)) << bad;
  }
}

// Request bodies held across connections are bounded by --max-bodies-bytes:
// clients that announce bodies and never send them hold their share until
// they go, and a request past the budget gets 503, not memory.
TEST_F(Serve, BodiesHeldAcrossConnectionsAreBounded) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1", "--max-body-bytes", "1024",
                        "--max-bodies-bytes", "2048"});
  std::vector<int> holders;
  for (int k = 0; k < 2; ++k) {
    holders.push_back(connect_to(server.port));
    const std::string head = "POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n{";
    ASSERT_EQ(::send(holders.back(), head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string request = raw_predict(json{{"inputs", {"good"}}}.dump(), "Connection: close\r\n");
  auto ask = [&] {
    const int fd = connect_to(server.port);
    EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    const std::string got = read_all(fd);
    ::close(fd);
    return got;
  };
  const std::string refused = ask();
  EXPECT_EQ(refused.rfind("HTTP/1.1 503 ", 0), 0u) << refused;
  EXPECT_NE(refused.find("the server holds as many request bodies as it takes"), std::string::npos) << refused;
  ::close(holders.back());  // its share comes back
  holders.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string answered = ask();
  EXPECT_EQ(answered.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answered;
  for (int h : holders) ::close(h);
}

// Past --connections, a new connection takes the slot of the one that has
// waited longest without a whole request header, which is closed; when every
// open connection holds a request, the new one is closed at once. Both counted.
TEST_F(Serve, ConnectionsPastTheLimitEvictTheLongestWaitingOrAreTurnedAway) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1", "--connections", "3",
                        "--connections-per-peer", "3", "--request-timeout-ms", "30000"});
  // Three connections that hold requests: header whole, body still to come.
  const std::string held_request = "POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 64\r\n\r\n{";
  std::vector<int> held;
  for (int k = 0; k < 3; ++k) {
    held.push_back(connect_to(server.port));
    ASSERT_EQ(::send(held.back(), held_request.data(), held_request.size(), 0),
              static_cast<ssize_t>(held_request.size()));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int extra = connect_to(server.port);
  EXPECT_EQ(read_all(extra, std::chrono::milliseconds(2000)), "");  // closed without a word
  ::close(extra);
  // One of them goes: its slot is free again. Two that have sent nothing wait beside the two still held.
  ::close(held.back());
  held.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int waiting = connect_to(server.port);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Full again: the next connection evicts the one waiting without a header, not one holding a request.
  const int fd = connect_to(server.port);
  EXPECT_EQ(read_all(waiting, std::chrono::milliseconds(2000)), "");  // closed by the server
  ::close(waiting);
  const std::string request = "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  const std::string got = read_all(fd);
  ::close(fd);
  EXPECT_NE(got.find("\"turned_away\":1"), std::string::npos) << got;
  EXPECT_NE(got.find("\"evicted\":1"), std::string::npos) << got;
  // The connections holding requests were never touched: their requests still complete.
  for (int h : held) {
    const std::string rest = R"("inputs": ["good"]})" + std::string(64 - 1 - 19, ' ');
    ASSERT_EQ(::send(h, rest.data(), rest.size(), 0), static_cast<ssize_t>(rest.size()));
    const std::string answer = read_all(h, std::chrono::milliseconds(300));
    EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer;
    ::close(h);
  }
}

// Clients holding every slot they can with connections that send a byte and
// wait, reconnecting as each is closed: each address holds at most its share
// (--connections-per-peer, half of --connections by default; past it a new
// connection is closed at once), and when two such addresses fill the server
// a normal client's connection takes the slot of the one that has waited
// longest. Every normal request is answered.
TEST_F(Serve, SlotHogsCannotLockOthersOut) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1", "--connections", "20",
                        "--request-timeout-ms", "2000", "--idle-timeout-ms", "2000"});
  std::atomic<bool> done{false};
  std::atomic<int> hog_connects{0};
  auto hog = [&](const char* from) {
    std::vector<int> fds;
    while (!done) {
      const int fd = connect_to(server.port, from);
      ::send(fd, "P", 1, MSG_NOSIGNAL);
      fds.push_back(fd);
      ++hog_connects;
      // Keep 20 open at once (twice its share), the oldest replaced.
      if (fds.size() > 20) ::close(fds.front()), fds.erase(fds.begin());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (int fd : fds) ::close(fd);
  };
  std::thread first(hog, "127.0.0.2"), second(hog, "127.0.0.3");
  while (hog_connects < 60) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::string request = raw_predict(json{{"inputs", {"good"}}}.dump(), "Connection: close\r\n");
  int answered = 0;
  for (int r = 0; r < 40; ++r) {
    const int fd = connect_to(server.port);
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    const std::string got = read_all(fd, std::chrono::milliseconds(3000));
    ::close(fd);
    answered += got.rfind("HTTP/1.1 200 OK\r\n", 0) == 0;
  }
  EXPECT_EQ(answered, 40);
  auto c = server.client();
  const std::map<std::string, double> m = parse_exposition(c.Get("/metrics")->body);
  done = true;
  first.join();
  second.join();
  EXPECT_LE(m.at("multihead_connections_open"), 20);
  EXPECT_GT(m.at("multihead_connections_evicted_total"), 0);
}

// One address holds at most its share of the connections: its next one
// takes the slot of its own that has waited longest, and those of other
// addresses are left alone.
TEST_F(Serve, OneAddressHoldsAtMostItsShare) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1", "--connections", "20",
                        "--connections-per-peer", "4", "--request-timeout-ms", "30000"});
  const int other = connect_to(server.port, "127.0.0.3");
  std::vector<int> mine;
  for (int k = 0; k < 7; ++k) {
    mine.push_back(connect_to(server.port, "127.0.0.2"));
    ::send(mine.back(), "P", 1, MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto closed = [](int fd) {
    pollfd p{fd, POLLIN, 0};
    char b;
    return ::poll(&p, 1, 200) > 0 && ::recv(fd, &b, 1, MSG_DONTWAIT) == 0;
  };
  for (int k = 0; k < 7; ++k) EXPECT_EQ(closed(mine[static_cast<std::size_t>(k)]), k < 3) << k;
  EXPECT_FALSE(closed(other));
  for (int fd : mine) ::close(fd);
  ::close(other);
}

// Transfer-Encoding other than exactly "chunked" (RFC 9112: a coding the
// server does not implement is 501; chunked not last, twice, or beside a
// Content-Length is 400), and duplicate Content-Lengths, are answered and the
// connection closed: a request hidden in the body is never read as another.
TEST_F(Serve, AmbiguousFramingIsRefusedAndNothingBehindItIsRead) {
  const fs::path run_dir = classifier();
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1"});
  const std::string hidden = "GET /v1/model HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string chunked = fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", hidden.size(), hidden);
  const std::string head = "POST /v1/predict HTTP/1.1\r\nHost: x\r\n";
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {head + "Transfer-Encoding: chunked, identity\r\n\r\n" + hidden, "501",
       "Transfer-Encoding 'identity' is not implemented; this server takes chunked alone"},
      {head + "Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked, "501",
       "Transfer-Encoding 'gzip' is not implemented"},
      {head + "Transfer-Encoding: identity\r\n\r\n" + hidden, "501", "Transfer-Encoding 'identity' is not implemented"},
      {head + "Transfer-Encoding: chunked;ext=1\r\n\r\n" + chunked, "400", "is malformed"},
      {head + "Transfer-Encoding: chunked,\r\n\r\n" + chunked, "400", "Transfer-Encoding '' is malformed"},
      {head + "Transfer-Encoding: chunked, chunked\r\n\r\n" + chunked, "400", ""},
      {"POST /v1/predict HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked, "400",
       "Transfer-Encoding in an HTTP/1.0 request"},
      {head + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n" + chunked, "400", ""},
      {head + "Content-Length: 3\r\nContent-Length: 3\r\n\r\n{}\n" + hidden, "400", ""},
      {head + "Content-Length: 3\r\nContent-Length: 40\r\n\r\n{}\n" + hidden, "400", ""},
  };
  for (const auto& [bytes, status, why] : cases) {
    const auto start = std::chrono::steady_clock::now();
    const int fd = connect_to(server.port);
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    const std::string got = read_all(fd);  // to the server's close
    ::close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 " + status + " ", 0), 0u) << bytes << "\n" << got;
    EXPECT_NE(got.find(why), std::string::npos) << got;
    EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << got;
    EXPECT_EQ(got.find("\"task\""), std::string::npos) << "the hidden request was answered:\n" << got;
    EXPECT_EQ(got.find("HTTP/1.1", 1), std::string::npos) << "a second answer:\n" << got;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500)) << bytes;
  }
  // chunked alone, in any case, is served.
  const std::string body = json{{"inputs", {"good"}}}.dump();
  const std::string ok = head + "Transfer-Encoding: Chunked\r\nConnection: close\r\n\r\n" +
                         fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", body.size(), body);
  const int fd = connect_to(server.port);
  ASSERT_EQ(::send(fd, ok.data(), ok.size(), 0), static_cast<ssize_t>(ok.size()));
  const std::string answer = read_all(fd);
  ::close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << answer;
}

// An IPv6 address is bracketed in the URL the server prints (RFC 3986).
TEST_F(Serve, AnIpv6HostIsPrintedInBrackets) {
  const fs::path run_dir = classifier();
  ServeConfig cfg;
  cfg.host = "::1";
  cfg.port = 0;
  std::unique_ptr<ModelServer> server;
  try {
    server = std::make_unique<ModelServer>(run_dir.string(), cfg);
  } catch (const IoError& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  EXPECT_EQ(server->url(), "http://[::1]:" + std::to_string(server->port()));
}

// Every numeric flag has a range; a value outside it exits 2 naming the flag
// (--connections 100000000 started tens of thousands of threads; -1 bytes
// removed the limit).
TEST_F(Serve, NumericFlagsOutsideTheirRangesExitTwo) {
  const fs::path run_dir = classifier();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--connections 100000000", "--connections must be in [0, 65536], got 100000000"},
      {"--request-timeout-ms 0", "--request-timeout-ms must be in [100, 3600000], got 0"},
      {"--max-inputs 0", "--max-inputs must be in [1, 1048576], got 0"},
      {"--max-inputs -5", "--max-inputs must be in [1, 1048576], got -5"},
      {"--max-input-bytes -1", "--max-input-bytes must be in [1, 1073741824], got -1"},
      {"--max-body-bytes -1", "--max-body-bytes must be in [1, 1073741824], got -1"},
      {"--max-body-bytes 0", "--max-body-bytes must be in [1, 1073741824], got 0"},
      {"--max-bodies-bytes 1000", "--max-bodies-bytes must be in [1048576, 17179869184], got 1000"},
      {"--max-batch 0", "--max-batch must be in [1, 1048576], got 0"},
      {"--port 70000", "--port must be in [0, 65535], got 70000"},
  };
  for (const auto& [flags, error] : cases) {
    const std::string port = flags.find("--port") == std::string::npos ? " --port 0 " : " ";
    CliRun r = run("serve --run " + run_dir.string() + port + flags);
    EXPECT_EQ(r.code, 2) << flags;
    EXPECT_EQ(r.err, "multihead: error: " + error + "\n") << flags;
    EXPECT_TRUE(r.out.empty()) << flags;
  }
}

TEST_F(Serve, BadCommandLinesExitTwo) {
  CliRun missing = run("serve --run " + (dir / "none").string() + " --port 0");
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(count_lines(missing.err), 1) << missing.err;
  const fs::path run_dir = classifier();
  CliRun tokens = run("serve --run " + run_dir.string() + " --port 0 --n-best 3");
  EXPECT_EQ(tokens.code, 2);
  EXPECT_EQ(tokens.err, "multihead: error: --n-best and --beam apply to pronunciation runs only\n");
  ServerProcess server({"--run", run_dir.string(), "--port", "0", "--threads", "1"});
  CliRun taken = run("serve --run " + run_dir.string() + " --port " + std::to_string(server.port));
  EXPECT_EQ(taken.code, 2);
  EXPECT_EQ(taken.err, "multihead: error: cannot listen on 127.0.0.1:" + std::to_string(server.port) +
                           " (address in use, or not this machine's)\n");
  EXPECT_TRUE(taken.out.empty());
}

}  // namespace
}  // namespace multihead::test
