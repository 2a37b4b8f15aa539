// grpo-tokenize: encode / decode / render chats from the command line (apps/grpo-tokenize's
// main is one line calling this). Boost-free: flags are parsed by hand.
#pragma once

#include <iosfwd>

namespace grpo::cli {

// Exit codes: apps/cli/exit_codes.h (docs/cli.md#exit-codes): 0, 1 internal error, 2 bad command
// line, 3 the tokenizer files are missing or invalid, 5 an input line is not what the mode
// expects (its line number in the message).
int grpo_tokenize_main(int argc, char** argv);
// Same, with explicit streams (tests).
int grpo_tokenize_run(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace grpo::cli
