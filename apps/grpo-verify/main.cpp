// grpo-verify: score completions offline with the verifier plugins. A thin main over core/app/.
#include "core/app/grpo_verify.h"

int main(int argc, char** argv) { return grpo::core::grpo_verify_main(argc, argv); }
