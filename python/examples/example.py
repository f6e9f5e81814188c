"""Two chat prompts through nano-vllm's API, on nanovllm's C++ engine.

    python3 python/examples/example.py [MODEL_DIR]

The calls are nano-vllm's example ones; the tokenizer comes from the LLM (llm.tokenizer) instead
of transformers' AutoTokenizer, so nothing but this package is needed.
"""
import os
import sys

from nanovllm import LLM, SamplingParams


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/huggingface/Qwen3-0.6B/")
    llm = LLM(model, enforce_eager=True, tensor_parallel_size=1)
    tokenizer = llm.tokenizer

    sampling_params = SamplingParams(temperature=0.6, max_tokens=256)
    questions = ["introduce yourself", "list all prime numbers within 100"]
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                      add_generation_prompt=True)
        for q in questions
    ]
    outputs = llm.generate(prompts, sampling_params)

    for prompt, output in zip(prompts, outputs):
        print("\n")
        print(f"Prompt: {prompt!r}")
        print(f"Completion: {output['text']!r}")


if __name__ == "__main__":
    main()
