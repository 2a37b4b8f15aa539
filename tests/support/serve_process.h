// A grpo-serve process for tests and benchmarks: started with --port 0 on loopback, ready once
// it has written its port file, stopped with SIGTERM (then SIGKILL) when the object goes. Its
// stderr goes to a log file that error messages can show.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace grpo::testing {

class ServeProcess {
 public:
  // `binary` is grpo-serve; `args` come after --model DIR --port 0 --port-file F; `work_dir`
  // holds the port file and serve.log.
  ServeProcess(const std::string& binary, const std::string& model_dir, const std::string& work_dir,
               const std::vector<std::string>& args = {}, double ready_timeout_s = 120.0)
      : port_file_(work_dir + "/serve.port"), log_(work_dir + "/serve.log") {
    ::unlink(port_file_.c_str());
    std::vector<std::string> argv{binary, "--model", model_dir, "--port", "0", "--port-file", port_file_};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) ::dup2(fd, 2), ::dup2(fd, 1);
      std::vector<char*> c;
      for (auto& a : argv) c.push_back(a.data());
      c.push_back(nullptr);
      ::execv(binary.c_str(), c.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(ready_timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(port_file_);
      if (in >> port_ && port_ > 0) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("grpo-serve exited before listening:\n" + log());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    stop();
    throw std::runtime_error("grpo-serve did not start listening in time:\n" + log());
  }
  ~ServeProcess() { stop(); }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string log() const {
    std::ifstream in(log_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  // SIGTERM, then SIGKILL after 20 s; the exit status (-1 when killed or already stopped).
  int stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 400; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return -1;
  }

 private:
  std::string port_file_, log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace grpo::testing
