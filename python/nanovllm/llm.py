"""LLM: nano-vllm's entry point, LLM(model, **engine_kwargs).generate(prompts, sampling_params)."""
from nanovllm import _C
from nanovllm.config import Config
from nanovllm.progress import ProgressBar
from nanovllm.sampling_params import SamplingParams
from nanovllm.tokenizer import Tokenizer


class LLM:
    def __init__(self, model, **kwargs):
        self.config = Config.from_kwargs(model, kwargs)
        self._engine = _C.LLM(self.config.to_c())
        self.tokenizer = Tokenizer(self._engine)

    def _prompt_ids(self, prompt, i):
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt)
        if isinstance(prompt, (list, tuple)) and all(
                isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return list(prompt)
        raise TypeError(f"prompt {i} must be a str or a list of token ids, "
                        f"got {type(prompt).__name__}")

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        """One {"text", "token_ids", "finish_reason"} dict per prompt, in order (and "error"
        when the engine ended a request with one). prompts: strings or lists of token ids (a
        single string is one prompt); sampling_params: one for all prompts or one per prompt
        (None: SamplingParams()). finish_reason: "stop", "length", "abort" or "error".
        Ctrl-C aborts the call's requests and raises KeyboardInterrupt; the LLM stays usable."""
        if isinstance(prompts, str):
            prompts = [prompts]
        ids = [self._prompt_ids(p, i) for i, p in enumerate(prompts)]
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            params = [sampling_params.to_c()]
        else:
            params = [sp.to_c() for sp in sampling_params]
        if not use_tqdm:
            return self._engine.generate(ids, params)
        with ProgressBar(len(ids), desc="Generating") as bar:
            return self._engine.generate(ids, params, bar.update)

    def stream(self, prompt, sampling_params=None):
        """An iterator over one request's output as it is generated: dicts with the new
        "token_ids" and "text" since the previous one, "finished", and "finish_reason" on the
        last. Closing it (or dropping it) early aborts the request."""
        ids = self._prompt_ids(prompt, 0)
        sp = sampling_params if sampling_params is not None else SamplingParams()
        return self._engine.stream(ids, sp.to_c())

    def chat(self, messages, sampling_params=None, use_tqdm=False, **template_kwargs):
        """The chat template applied to messages (add_generation_prompt=True; keyword arguments
        such as enable_thinking=False or tools=[...] go to the template), then generate."""
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                    add_generation_prompt=True, **template_kwargs)
        return self.generate([prompt], sampling_params, use_tqdm)[0]
