// grpo-tokenize: encode / decode / render chats from the command line (apps/grpo-tokenize is a
// one-line main calling this). Torch-free and Boost-free (flags are parsed by hand).
#pragma once

#include <iosfwd>

namespace grpo::core {

enum TokenizeExitCode : int {
  kTokenizeOk = 0,
  kTokenizeInternalError = 1,  // an unexpected failure (a bug)
  kTokenizeUsage = 2,          // bad command line (unknown flag, unknown template, ...)
  kTokenizeBadTokenizer = 3,   // the tokenizer files are missing or invalid (file and JSON key in the message)
  kTokenizeBadInput = 5,       // an input line is not what the mode expects (line number in the message)
};

int grpo_tokenize_main(int argc, char** argv);
// Same, with explicit streams (tests).
int grpo_tokenize_run(int argc, char** argv, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace grpo::core
