// The sandbox's LineReader (plugins/shared/sandbox/line_reader.h), which python_reward's workers
// and the python tool's interpreters read their pipes through: its bounds hold while it reads,
// whatever the other end writes.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "plugins/shared/sandbox/line_reader.h"

namespace {

using grpo_sandbox::LineReader;

struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() {
    EXPECT_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
  }
  ~Pipe() {
    close_write();
    if (fds[0] >= 0) close(fds[0]);
  }
  void write_all(const std::string& s) const {
    ASSERT_EQ(write(fds[1], s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  void close_write() {
    if (fds[1] >= 0) close(fds[1]);
    fds[1] = -1;
  }
};

TEST(LineReader, SplitsLinesSkipsEmptyOnesAndKeepsTheRest) {
  for (const bool carriage_returns : {false, true}) {
    Pipe p;
    p.write_all("a\n\nb\r\nc");
    LineReader reader(100, carriage_returns);
    std::vector<LineReader::Line> lines;
    EXPECT_TRUE(reader.read(p.fds[0], &lines));  // open: nothing more yet
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0].text, "a");
    EXPECT_EQ(lines[1].text, carriage_returns ? "b" : "b\r");
    EXPECT_EQ(reader.pending(), 1u);
    p.close_write();
    EXPECT_FALSE(reader.read(p.fds[0], &lines));  // end of file
    LineReader::Line rest;
    ASSERT_TRUE(reader.take_rest(&rest));
    EXPECT_EQ(rest.text, "c");
    EXPECT_FALSE(reader.take_rest(&rest));
  }
}

// 50 MB without a line break: one cut line of max_line bytes as soon as it passes the cap, the
// rest read and dropped, the next line intact; never more than max_line bytes held.
TEST(LineReader, ALineOverTheCapIsCutWhileReadAndTheRestDropped) {
  Pipe p;
  std::thread writer([&] {
    const std::string chunk(1 << 20, 'y');
    fcntl(p.fds[1], F_SETFL, 0);  // blocking: the reader paces the writer
    for (int i = 0; i < 50; ++i) EXPECT_EQ(write(p.fds[1], chunk.data(), chunk.size()), ssize_t{1 << 20});
    EXPECT_EQ(write(p.fds[1], "\nnext\n", 6), 6);
    p.close_write();  // always: the reader reads to the end of file
  });
  LineReader reader(1000);
  std::vector<LineReader::Line> lines;
  std::size_t most_held = 0;
  while (reader.read(p.fds[0], &lines)) {
    most_held = std::max(most_held, reader.pending());
    usleep(100);
  }
  writer.join();
  EXPECT_LE(most_held, 1000u);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(lines[0].cut);
  EXPECT_EQ(lines[0].text, std::string(1000, 'y'));
  EXPECT_FALSE(lines[1].cut);
  EXPECT_EQ(lines[1].text, "next");
}

// One read() takes at most its budget: the rest stays in the pipe for the next one.
TEST(LineReader, OneReadTakesAtMostItsBudget) {
  Pipe p;
  p.write_all(std::string(60000, 'y') + "\n");
  LineReader reader(100000);
  std::vector<LineReader::Line> lines;
  EXPECT_TRUE(reader.read(p.fds[0], &lines, 4096));
  int left = 0;
  ASSERT_EQ(ioctl(p.fds[0], FIONREAD, &left), 0);
  EXPECT_EQ(left, 60001 - 4096);
  EXPECT_EQ(reader.pending(), 4096u);
  EXPECT_TRUE(lines.empty());
  EXPECT_TRUE(reader.read(p.fds[0], &lines));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text.size(), 60000u);
}

}  // namespace
