#include "core/tokenizer/tokenize_cli.h"

int main(int argc, char** argv) { return grpo::core::grpo_tokenize_main(argc, argv); }
