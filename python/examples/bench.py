"""Throughput on nano-vllm's bench.py workload, through nano-vllm's API on nanovllm's engine.

    python3 python/examples/bench.py --model MODEL_DIR [--num-seqs 256 ...] [--dry-run]

The workload is bench.py's: random.seed(0), then num_seqs prompts of randint(100, 1024) random
token ids, then for each a SamplingParams(temperature=0.6, ignore_eos=True,
max_tokens=randint(100, 1024)). With the defaults that is 142,827 prompt and 133,966 output
tokens. --dry-run prints those totals and stops; the other flags scale the workload down.
"""
import argparse
import time
from random import randint, seed

from nanovllm import LLM, SamplingParams


def make_workload(num_seqs, max_input_len, max_output_len, min_len):
    prompt_token_ids = [[randint(0, 10000) for _ in range(randint(min_len, max_input_len))]
                        for _ in range(num_seqs)]
    sampling_params = [SamplingParams(temperature=0.6, ignore_eos=True,
                                      max_tokens=randint(min_len, max_output_len))
                       for _ in range(num_seqs)]
    return prompt_token_ids, sampling_params


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="models/qwen3-0.6b")
    parser.add_argument("--num-seqs", type=int, default=256)
    parser.add_argument("--max-input-len", type=int, default=1024)
    parser.add_argument("--max-output-len", type=int, default=1024)
    parser.add_argument("--min-len", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dry-run", action="store_true", help="print the workload totals only")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: all cores)")
    parser.add_argument("--kv-cache-memory", type=int, default=0, help="KV cache bytes (0: default)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    seed(args.seed)
    prompt_token_ids, sampling_params = make_workload(args.num_seqs, args.max_input_len,
                                                      args.max_output_len, args.min_len)
    prompt_tokens = sum(len(p) for p in prompt_token_ids)
    total_tokens = sum(sp.max_tokens for sp in sampling_params)
    print(f"Workload: {args.num_seqs} seqs, {prompt_tokens} prompt tokens, "
          f"{total_tokens} output tokens")
    if args.dry_run:
        return

    llm = LLM(args.model, enforce_eager=False, max_model_len=4096, threads=args.threads,
              kv_cache_memory=args.kv_cache_memory, device=args.device)
    llm.generate(["Benchmark: "], SamplingParams())  # warm-up
    t = time.time()
    llm.generate(prompt_token_ids, sampling_params, use_tqdm=False)
    t = time.time() - t
    throughput = total_tokens / t
    print(f"Total: {total_tokens}tok, Time: {t:.2f}s, Throughput: {throughput:.2f}tok/s")


if __name__ == "__main__":
    main()
