// LineReader: a started program's pipe read as lines under bounds (sandbox.h starts the
// programs; python_reward's workers and the python tool's interpreters read them with this).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace grpo_sandbox {

// Reads one of a started program's pipes (non-blocking: a SandboxProcess's stdout or stderr)
// as lines, under bounds that hold while reading, whatever the program writes: the host never
// holds more than `max_line` bytes of an unfinished line (a longer line is cut there and the
// rest of it is read and dropped), and one read() takes at most a budget of bytes, so that a
// program that writes without end does not keep its reader from its deadlines. Empty lines
// are skipped. python_reward's workers and the python tool's interpreters read their protocol
// and their stderr through it (a protocol line that is cut is a fault of the program).
class LineReader {
 public:
  struct Line {
    std::string text;   // at most max_line bytes, without its line break
    bool cut = false;   // the line went on past max_line bytes; the rest of it is dropped
  };
  static constexpr std::size_t kReadBudget = std::size_t{1} << 20;

  // `carriage_returns`: '\r' ends a line too (progress bars).
  explicit LineReader(std::size_t max_line, bool carriage_returns = false);

  // Reads what `fd` holds now, at most `budget` bytes, and appends the lines it completed to
  // `lines` (a line that goes past max_line as soon as it does, cut and marked so). False at
  // end of file (the program closed the pipe or exited), true otherwise.
  bool read(int fd, std::vector<Line>* lines, std::size_t budget = kReadBudget);
  // The unfinished line (a program's last words without a line break), taken out; false when
  // there is none.
  bool take_rest(Line* line);
  // Bytes of the unfinished line held.
  std::size_t pending() const { return partial_.size(); }
  // Forgets the unfinished line (a new program on the same reader).
  void reset();

 private:
  void consume(const char* data, std::size_t n, std::vector<Line>* lines);

  std::size_t max_line_;
  bool carriage_returns_;
  std::string partial_;
  bool dropping_ = false;  // the rest of a cut line is being read and dropped
};

}  // namespace grpo_sandbox
