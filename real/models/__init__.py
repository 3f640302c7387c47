"""What is trained: tiny-gpt (`tinygpt`), Hugging Face GPT-2 and Llama models cut into the
planner's layers (`hf`, the optional `[hf]` extra), sleeping layers (`emulated`), and the
single-process reference training (`reference`). Imports only `real.config`."""
