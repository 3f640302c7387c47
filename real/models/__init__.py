"""What is trained: tiny-gpt (`tinygpt`), sleeping layers (`emulated`), and the
single-process reference training (`reference`). Imports only `real.config`."""
