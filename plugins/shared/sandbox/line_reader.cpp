#include "plugins/shared/sandbox/line_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace grpo_sandbox {

LineReader::LineReader(std::size_t max_line, bool carriage_returns)
    : max_line_(max_line > 0 ? max_line : 1), carriage_returns_(carriage_returns) {}

bool LineReader::read(int fd, std::vector<Line>* lines, std::size_t budget) {
  char chunk[65536];
  std::size_t taken = 0;
  while (taken < budget) {
    const ssize_t got = ::read(fd, chunk, std::min(sizeof chunk, budget - taken));
    if (got > 0) {
      taken += static_cast<std::size_t>(got);
      consume(chunk, static_cast<std::size_t>(got), lines);
      continue;
    }
    if (got == 0) return false;
    if (errno == EINTR) continue;
    return true;  // EAGAIN: all there is was read
  }
  return true;  // the budget is spent; the rest waits for the next read
}

void LineReader::consume(const char* data, std::size_t n, std::vector<Line>* lines) {
  const char* end = data + n;
  while (data < end) {
    const char* brk = data;
    while (brk < end && *brk != '\n' && !(carriage_returns_ && *brk == '\r')) ++brk;
    const std::size_t len = static_cast<std::size_t>(brk - data);
    if (dropping_) {  // the rest of a cut line: nothing of it is kept
      if (brk < end) dropping_ = false;
    } else if (len > max_line_ - partial_.size()) {  // the line outgrows max_line: cut it now
      partial_.append(data, max_line_ - partial_.size());
      lines->push_back(Line{std::move(partial_), true});
      partial_.clear();
      dropping_ = brk == end;
    } else {
      partial_.append(data, len);
      if (brk < end && !partial_.empty()) {
        lines->push_back(Line{std::move(partial_), false});
        partial_.clear();
      }
    }
    data = brk < end ? brk + 1 : end;
  }
}

bool LineReader::take_rest(Line* line) {
  if (partial_.empty()) return false;
  *line = Line{std::move(partial_), false};
  partial_.clear();
  return true;
}

void LineReader::reset() {
  partial_.clear();
  dropping_ = false;
}

}  // namespace grpo_sandbox
