// The nanovllm CLI: make-model, generate, bench (chat, tokenize and serve arrive with their issues).
int main() { return 0; }
