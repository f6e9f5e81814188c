#pragma once
// Server tests: the tiny model with Qwen3's tokenizer, a `nanovllm serve` child process on
// 127.0.0.1 with a free port (--port 0), and a small blocking HTTP client (Boost.Beast, in
// server_fixture.cpp).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "model/make_model.h"
#include "model/model_fixture.h"
#include "reference/test_util.h"

namespace nanovllm::test {

namespace fs = std::filesystem;

struct HttpResult {
  int status = 0;  // 0: no response (connection error)
  std::string body;
  std::map<std::string, std::string> headers;
};

// One request on a new connection; headers as {"Name", "value"} (server_fixture.cpp: the
// Beast client is compiled once, not in every test file).
HttpResult http_call(
    int port, const std::string& method, const std::string& target, const std::string& body = "",
    const std::vector<std::pair<std::string, std::string>>& headers = {{"Content-Type",
                                                                        "application/json"}},
    int timeout_s = 60);

// Raw bytes on a new connection (half-closed after sending when half_close); the whole reply.
std::string raw_call(int port, const std::string& bytes, bool half_close = true,
                     int timeout_s = 20);

// `nanovllm serve` as a child process.
class ServerProcess {
 public:
  ServerProcess(const std::string& model, const std::vector<std::string>& extra_args) {
    log_ = (fs::temp_directory_path() / ("nanovllm-serve-log-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(counter()++))).string();
    std::vector<std::string> args = {binary_dir() + "/nanovllm", "serve", "--model", model,
                                     "--host", "127.0.0.1", "--port", "0", "--block-size", "16",
                                     "--threads", "2"};
    for (const auto& a : extra_args) args.push_back(a);
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* f = std::fopen(log_.c_str(), "w");
      if (f) {
        ::dup2(::fileno(f), 1);
        ::dup2(::fileno(f), 2);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // The port line, then /health 200 (bounded).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline && port_ == 0) {
      std::ifstream in(log_);
      std::string line;
      while (std::getline(in, line)) {
        const std::string key = "listening on http://127.0.0.1:";
        size_t at = line.find(key);
        if (at != std::string::npos) port_ = std::atoi(line.c_str() + at + key.size());
      }
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (exited()) break;
    }
    while (port_ != 0 && std::chrono::steady_clock::now() < deadline && !exited()) {
      if (http_call(port_, "GET", "/health", "", {}, 5).status == 200) {
        ready_ = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~ServerProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    fs::remove(log_, ec);
  }

  bool ready() const { return ready_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const {
    std::ifstream in(log_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Sends sig and waits up to timeout_s; the exit status (-1: still running, then killed).
  int stop(int sig = SIGTERM, int timeout_s = 30) {
    ::kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    reaped_ = true;
    return -1;
  }

 private:
  bool exited() {
    int status = 0;
    if (!reaped_ && ::waitpid(pid_, &status, WNOHANG) == pid_) reaped_ = true;
    return reaped_;
  }
  static int& counter() {
    static int c = 0;
    return c;
  }
  pid_t pid_ = -1;
  int port_ = 0;
  bool ready_ = false;
  bool reaped_ = false;
  std::string log_;
};

// Runs a command, returns (exit status, stdout + stderr).
inline std::pair<int, std::string> run_command(const std::string& cmd) {
  std::FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace nanovllm::test
