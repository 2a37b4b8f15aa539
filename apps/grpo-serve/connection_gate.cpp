// GatedHttpServer and its gate (connection_gate.h).
#include "apps/grpo-serve/connection_gate.h"

#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

namespace grpo::serve {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxHeaderBytes = 64 << 10;  // a longer header block gets 431
constexpr std::size_t kReadAhead = 16 << 10;       // read at once for httplib's byte-by-byte header reads
constexpr int kMaxRejecting = 64;                  // connections being answered 503 at once; beyond, closed unanswered
constexpr auto kLinger = std::chrono::seconds(2);  // after the gate's own answer: input drained this long, so
                                                   // the close does not reset the connection before it is read
constexpr int kSweepMs = 100;                      // how often deadlines are checked
constexpr int kReadsPerEvent = 4;                  // reads of kReadAhead per readiness event: a client that keeps
                                                   // sending cannot hold the gate thread (epoll, level-triggered,
                                                   // reports the rest again)
constexpr std::size_t kMaxDrained = 1 << 20;       // discarded after the gate's answer; beyond, closed at once
constexpr rlim_t kReservedFiles = kMaxRejecting + 256;  // the connections being refused, and the model files,
                                                        // logs and pipes the process holds

Clock::duration seconds(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }

std::string seconds_text(double s) {
  std::ostringstream out;
  out << s << " s";
  return out.str();
}

bool wait_for(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int n = ::poll(&p, 1, timeout_ms);
    if (n >= 0) return n > 0;
    if (errno != EINTR) return false;
  }
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (rc == 0 && ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, service, sizeof service,
                               NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(service);
  }
}

// Raises the soft open-file limit to fit max_connections (servers' usual soft limit is 1024);
// returns the connections that fit. Past the limit, accept() and the server's own open() calls
// fail (EMFILE) and no connection gets its 503: fewer connections are served instead.
int fit_open_file_limit(int max_connections) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return max_connections;
  const rlim_t want = static_cast<rlim_t>(max_connections) + kReservedFiles;
  if (lim.rlim_cur >= want) return max_connections;
  const rlim_t raised = lim.rlim_max == RLIM_INFINITY ? want : std::min(want, lim.rlim_max);
  if (raised > lim.rlim_cur) {
    lim.rlim_cur = raised;
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur >= want) return max_connections;
  const int fits = lim.rlim_cur > kReservedFiles ? static_cast<int>(lim.rlim_cur - kReservedFiles) : 1;
  spdlog::warn("the open-file limit {} is below the {} that --max-connections {} needs: at most {} connections are "
               "open at once, the ones beyond get 503 (raise 'ulimit -n')",
               static_cast<unsigned long long>(lim.rlim_cur), static_cast<unsigned long long>(want), max_connections,
               fits);
  return fits;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

// One client connection: the bytes received and not read by httplib yet, and where it stands.
struct Connection {
  int fd = -1;
  std::string buf;          // httplib has read buf[0, pos)
  std::size_t pos = 0;
  std::size_t scanned = 0;  // buf[pos, scanned) holds no end of headers
  Clock::time_point deadline;
  int requests = 0;               // answered on this connection
  bool between_requests = false;  // idle after an answer: the keep-alive timeout runs
  bool rejected = false;          // beyond max_connections: answered 503 once its headers are in
  bool lingering = false;         // answered by the gate: input is drained until EOF or the deadline
  std::size_t drained = 0;        // bytes discarded while lingering

  bool has_bytes() const { return pos < buf.size(); }
  // The next request's headers are all here: their blank line (httplib ends headers at CRLF CRLF).
  bool headers_complete() {
    const std::size_t from = std::max(pos, scanned >= 3 ? scanned - 3 : 0);
    if (buf.find("\r\n\r\n", from) != std::string::npos) return true;
    scanned = buf.size();
    return false;
  }
  void drop_read_bytes() {
    buf.erase(0, pos);
    pos = scanned = 0;
  }
};

// httplib's view of a connection: the gate's buffered bytes first, then the socket, with
// httplib's read and write timeouts (as its own SocketStream).
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(Connection& c, int read_timeout_ms, int write_timeout_ms)
      : c_(c), read_ms_(read_timeout_ms), write_ms_(write_timeout_ms) {}

  bool is_readable() const override { return c_.has_bytes() || wait_for(c_.fd, POLLIN, read_ms_); }
  // Writable, and the client has not closed (a streamed answer stops when it leaves).
  bool is_writable() const override {
    if (!wait_for(c_.fd, POLLOUT, write_ms_)) return false;
    if (!wait_for(c_.fd, POLLIN, 0)) return true;
    char b = 0;
    return ::recv(c_.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  ssize_t read(char* ptr, std::size_t size) override {
    if (!c_.has_bytes()) {
      if (!wait_for(c_.fd, POLLIN, read_ms_)) return -1;
      if (size >= kReadAhead) return ::recv(c_.fd, ptr, size, 0);
      c_.buf.resize(kReadAhead);
      const ssize_t n = ::recv(c_.fd, c_.buf.data(), kReadAhead, 0);
      c_.buf.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
      c_.pos = c_.scanned = 0;
      if (n <= 0) return n;
    }
    const std::size_t n = std::min(size, c_.buf.size() - c_.pos);
    std::memcpy(ptr, c_.buf.data() + c_.pos, n);
    c_.pos += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, std::size_t size) override {
    if (!is_writable()) return -1;
    return ::send(c_.fd, ptr, size, MSG_NOSIGNAL);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(c_.fd, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(c_.fd, false, ip, port); }
  socket_t socket() const override { return c_.fd; }

 private:
  Connection& c_;
  int read_ms_, write_ms_;
};

}  // namespace

// The gate thread watches connections until their headers are in; request threads handle one
// request at a time and hand idle connections back.
class ConnectionGate {
 public:
  // Handles one request whose headers are in; false: close the connection.
  using ServeOne = std::function<bool(Connection&, bool stopping)>;

  ConnectionGate(const ConnectionLimits& limits, GateErrorBody error_body, ServeOne serve_one)
      : limits_(limits), error_body_(std::move(error_body)), serve_one_(std::move(serve_one)) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_;
    if (epoll_ < 0 || wake_ < 0 || ::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev) != 0)
      throw std::runtime_error(std::string("cannot watch connections: ") + std::strerror(errno));
    gate_ = std::thread([this] { run_gate(); });
    for (int i = 0; i < std::max(1, limits_.request_threads); ++i) request_threads_.emplace_back([this] { run_requests(); });
  }
  ~ConnectionGate() { shutdown(); }
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  // The listen thread: a new connection. Never blocks.
  void add(int fd) {
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->deadline = Clock::now() + seconds(limits_.header_timeout_s);
    if (open_.load() >= limits_.max_connections) {
      if (rejecting_.load() >= kMaxRejecting) {  // a flood: not even an answer
        ::close(fd);
        return;
      }
      c->rejected = true;
      ++rejecting_;
    } else {
      ++open_;
    }
    post(std::move(c));
  }

  // Idle connections close; the requests being handled (and those whose headers are in) are
  // answered, with "Connection: close"; then the threads end.
  void shutdown() {
    if (shut_down_) return;
    shut_down_ = true;
    stopping_ = true;
    wake();
    gate_.join();
    { std::lock_guard<std::mutex> lock(ready_m_); }  // a request thread between its check and its wait sees stopping_
    ready_cv_.notify_all();
    for (auto& t : request_threads_) t.join();
    ::close(epoll_);
    ::close(wake_);
  }

 private:
  void wake() {
    const std::uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof one);
  }

  void close_connection(Connection& c) {
    --(c.rejected ? rejecting_ : open_);
    ::close(c.fd);
  }

  // To the gate thread (any thread); closed at once when the gate has stopped.
  void post(std::unique_ptr<Connection> c) {
    {
      std::lock_guard<std::mutex> lock(inbox_m_);
      if (!inbox_closed_) inbox_.push_back(std::move(c));
    }
    if (c) return close_connection(*c);
    wake();
  }

  void run_gate() {
    std::vector<epoll_event> events(256);
    auto next_sweep = Clock::now();
    while (!stopping_) {
      const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), watched_.empty() ? -1 : kSweepMs);
      if (n < 0 && errno != EINTR) {
        spdlog::error("watching connections failed: {}; new requests are no longer read", std::strerror(errno));
        break;
      }
      for (int i = 0; i < n; ++i) {
        if (events[i].data.fd != wake_) {
          on_readable(events[i].data.fd);
          continue;
        }
        std::uint64_t count = 0;
        (void)!::read(wake_, &count, sizeof count);
        std::vector<std::unique_ptr<Connection>> arrived;
        {
          std::lock_guard<std::mutex> lock(inbox_m_);
          arrived.swap(inbox_);
        }
        for (auto& c : arrived) watch(std::move(c));
      }
      const auto now = Clock::now();
      if (now >= next_sweep) {
        sweep(now);
        next_sweep = now + std::chrono::milliseconds(kSweepMs);
      }
    }
    std::lock_guard<std::mutex> lock(inbox_m_);
    inbox_closed_ = true;
    for (auto& c : inbox_) close_connection(*c);
    inbox_.clear();
    for (auto& entry : watched_) close_connection(*entry.second);
    watched_.clear();
  }

  void watch(std::unique_ptr<Connection> c) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = c->fd;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, c->fd, &ev) != 0) return close_connection(*c);
    watched_[c->fd] = std::move(c);
  }

  void drop(std::unordered_map<int, std::unique_ptr<Connection>>::iterator it) {
    close_connection(*it->second);
    watched_.erase(it);
  }

  // Reads what arrived; a connection whose headers are complete goes to a request thread.
  void on_readable(int fd) {
    const auto it = watched_.find(fd);
    if (it == watched_.end()) return;
    Connection& c = *it->second;
    bool complete = false;
    char chunk[kReadAhead];
    for (int reads = 0; reads < kReadsPerEvent; ++reads) {
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) return drop(it);  // the client closed, or the connection failed
      if (c.lingering) {  // one that keeps uploading has had its chance to read the answer
        c.drained += static_cast<std::size_t>(n);
        if (c.drained > kMaxDrained || Clock::now() >= c.deadline) return drop(it);
        continue;
      }
      if (c.between_requests) {  // the next request begins: its headers have the header timeout
        c.between_requests = false;
        c.deadline = Clock::now() + seconds(limits_.header_timeout_s);
      }
      c.buf.append(chunk, static_cast<std::size_t>(n));
      if ((complete = c.headers_complete())) break;
      if (c.buf.size() - c.pos > kMaxHeaderBytes)
        return answer(c, 431, "the request's headers exceed " + std::to_string(kMaxHeaderBytes >> 10) + " KiB");
    }
    if (!complete) return;
    if (c.rejected)
      return answer(c, 503, "too many connections (at most " + std::to_string(limits_.max_connections) +
                                " open at once): retry later");
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    std::unique_ptr<Connection> ready = std::move(it->second);
    watched_.erase(it);
    {
      std::lock_guard<std::mutex> lock(ready_m_);
      ready_.push_back(std::move(ready));
    }
    ready_cv_.notify_one();
  }

  // The gate's own answer (a few hundred bytes: the socket buffer takes them), then a lingering close.
  void answer(Connection& c, int status, const std::string& message) {
    const std::string body = error_body_(status, message);
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
                      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\nConnection: close\r\n" + (status == 503 ? "Retry-After: 1\r\n" : "") + "\r\n" + body;
    (void)::send(c.fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::shutdown(c.fd, SHUT_WR);
    c.lingering = true;
    c.buf.clear();
    c.pos = c.scanned = 0;
    c.deadline = Clock::now() + kLinger;
  }

  void sweep(Clock::time_point now) {
    std::vector<int> expired;
    for (const auto& entry : watched_)
      if (now >= entry.second->deadline) expired.push_back(entry.first);
    for (const int fd : expired) {
      const auto it = watched_.find(fd);
      Connection& c = *it->second;
      if (c.lingering || !c.has_bytes()) drop(it);  // nothing asked: closed without an answer
      else answer(c, 408, "the request's headers did not arrive within " + seconds_text(limits_.header_timeout_s));
    }
  }

  void run_requests() {
    for (;;) {
      std::unique_ptr<Connection> c;
      {
        std::unique_lock<std::mutex> lock(ready_m_);
        ready_cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
        if (ready_.empty()) return;
        c = std::move(ready_.front());
        ready_.pop_front();
      }
      serve(std::move(c));
    }
  }

  void serve(std::unique_ptr<Connection> c) {
    for (;;) {
      const bool keep = serve_one_(*c, stopping_);
      c->drop_read_bytes();
      if (!keep || stopping_) return close_connection(*c);
      if (c->headers_complete()) continue;  // a pipelined request is here already
      if (c->has_bytes()) {
        c->deadline = Clock::now() + seconds(limits_.header_timeout_s);
      } else {
        c->between_requests = true;
        c->deadline = Clock::now() + seconds(limits_.keep_alive_timeout_s);
      }
      return post(std::move(c));
    }
  }

  const ConnectionLimits limits_;
  const GateErrorBody error_body_;
  const ServeOne serve_one_;
  int epoll_ = -1, wake_ = -1;
  std::atomic<bool> stopping_{false};
  bool shut_down_ = false;
  std::atomic<int> open_{0}, rejecting_{0};
  std::unordered_map<int, std::unique_ptr<Connection>> watched_;  // the gate thread's
  std::mutex inbox_m_;
  std::vector<std::unique_ptr<Connection>> inbox_;
  bool inbox_closed_ = false;
  std::mutex ready_m_;
  std::condition_variable ready_cv_;
  std::deque<std::unique_ptr<Connection>> ready_;  // headers in, waiting for a request thread
  std::thread gate_;
  std::vector<std::thread> request_threads_;
};

namespace {

// httplib's task queue: runs the accept callback at once, on the listen thread; it only hands the
// socket to the gate. shutdown() is called when the listen loop ends.
class GateQueue final : public httplib::TaskQueue {
 public:
  explicit GateQueue(ConnectionGate& gate) : gate_(gate) {}
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override { gate_.shutdown(); }

 private:
  ConnectionGate& gate_;
};

int to_ms(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

}  // namespace

GatedHttpServer::GatedHttpServer() {
  new_task_queue = [this] {
    limits_.max_connections = fit_open_file_limit(limits_.max_connections);
    gate_ = std::make_unique<ConnectionGate>(limits_, error_body_, [this](Connection& c, bool stopping) {
      ConnectionStream strm(c, to_ms(read_timeout_sec_, read_timeout_usec_), to_ms(write_timeout_sec_, write_timeout_usec_));
      // As httplib's own loop: the last request of a connection, or of a stopping server, says "Connection: close".
      ++c.requests;
      const bool last = stopping || svr_sock_ == INVALID_SOCKET || c.requests >= static_cast<int>(keep_alive_max_count_);
      bool closed = false;
      return process_request(strm, last, closed, nullptr) && !closed && !last;
    });
    return new GateQueue(*gate_);
  };
}

GatedHttpServer::~GatedHttpServer() = default;

void GatedHttpServer::set_connection_limits(const ConnectionLimits& limits, GateErrorBody error_body) {
  limits_ = limits;
  error_body_ = std::move(error_body);
  // httplib's Keep-Alive header states its own timeout (5 s): the gate's instead, rounded down
  // (the header takes whole seconds) so that a client trusting it does not reuse a closed connection.
  set_keep_alive_timeout(std::max<time_t>(1, static_cast<time_t>(limits.keep_alive_timeout_s)));
}

bool GatedHttpServer::process_and_close_socket(socket_t sock) {
  gate_->add(sock);
  return true;
}

}  // namespace grpo::serve
