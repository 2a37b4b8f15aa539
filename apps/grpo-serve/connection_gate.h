// grpo-serve's connection front: an idle or slow client costs a file descriptor, not an HTTP
// thread. Its own file because it is about sockets and threads, not the API (server.cpp).
//
// cpp-httplib 0.11 hands every accepted connection to a pool thread that blocks reading the
// request (up to the read timeout for each read) and then waits up to the keep-alive timeout for
// the next one, so as many half-open or idle connections as there are threads starve every other
// client. GatedHttpServer keeps httplib's request handling (parsing, routing, bodies, streaming)
// and takes over the connections:
//
//   listen thread (httplib)   gate thread (epoll)                       request threads
//   accept -> add() ------->  reads until the headers' blank line ---> process_request(), and
//                             (header timeout, keep-alive timeout) <--- back when idle again
//
// A request thread is held only by a request whose headers have all arrived: while it reads the
// body (httplib's read timeout per read, so a slow upload is not cut), generates, and writes the
// answer or the event stream. Connections beyond max_connections are answered 503.
#pragma once

#include <httplib.h>

#include <functional>
#include <memory>
#include <string>

namespace grpo::serve {

struct ConnectionLimits {
  double header_timeout_s = 10;      // a request's headers must be complete this long after its first byte
                                     // (a new connection: after the connect); else 408, or a silent close
  double keep_alive_timeout_s = 5;   // an idle connection between requests is closed after this
  int max_connections = 1024;        // open connections; the ones beyond get 503
  int request_threads = 128;         // requests handled at once (reading the body, waiting, answering)
};

// The body of the answers the gate writes itself (408, 431, 503): status, message -> JSON.
using GateErrorBody = std::function<std::string(int status, const std::string& message)>;

class ConnectionGate;

class GatedHttpServer : public httplib::Server {
 public:
  GatedHttpServer();
  ~GatedHttpServer() override;
  // Before listening.
  void set_connection_limits(const ConnectionLimits& limits, GateErrorBody error_body);

 private:
  // httplib's listen loop calls this for each accepted socket (through the task queue, at once):
  // the socket goes to the gate.
  bool process_and_close_socket(socket_t sock) override;

  ConnectionLimits limits_;
  GateErrorBody error_body_;
  std::unique_ptr<ConnectionGate> gate_;  // made when listening starts, stopped when it ends
};

}  // namespace grpo::serve
