// grpo-tokenize: encode, decode and render chats with a tokenizer. A thin main over
// grpo_tokenize.cpp (the grpo_cli library).
#include "apps/grpo-tokenize/grpo_tokenize.h"

int main(int argc, char** argv) { return grpo::cli::grpo_tokenize_main(argc, argv); }
