// grpo-verify: score completions offline with the verifier plugins. A thin main over
// grpo_verify.cpp (the grpo_cli library).
#include "apps/grpo-verify/grpo_verify.h"

int main(int argc, char** argv) { return grpo::cli::grpo_verify_main(argc, argv); }
