"""LLM.tokenizer: the model folder's tokenizer.json and chat template, with the calls nano-vllm
makes on transformers' AutoTokenizer (encode, decode, apply_chat_template, eos_token_id)."""
import json


class Tokenizer:
    def __init__(self, engine):
        self._engine = engine        # nanovllm._C.LLM (owns the tokenizer and chat template)
        self._tok = engine.tokenizer  # None when the folder has no tokenizer.json

    def _require(self):
        if self._tok is None:
            raise ValueError("the model folder has no tokenizer.json: give prompts as token ids")
        return self._tok

    def encode(self, text, add_special_tokens=True):
        """Token ids of text; special-token text (e.g. "<|im_end|>") becomes its id.
        add_special_tokens adds the post-processor's tokens as transformers does (Llama's BOS;
        Qwen's tokenizers add none)."""
        return self._require().encode(text, add_special_tokens=add_special_tokens)

    def decode(self, token_ids, skip_special_tokens=False):
        return self._require().decode(list(token_ids), skip_special_tokens)

    def batch_decode(self, sequences, skip_special_tokens=False):
        return [self.decode(s, skip_special_tokens) for s in sequences]

    def __call__(self, text, add_special_tokens=True):
        if isinstance(text, (list, tuple)):
            ids = [self.encode(t, add_special_tokens) for t in text]
            return {"input_ids": ids, "attention_mask": [[1] * len(i) for i in ids]}
        ids = self.encode(text, add_special_tokens)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self._require().token_to_id(tokens)
        return [self._require().token_to_id(t) for t in tokens]

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self._require().id_to_token(ids)
        return [self._require().id_to_token(i) for i in ids]

    @property
    def vocab_size(self):
        return self._require().vocab_size

    def __len__(self):
        return self.vocab_size

    @property
    def eos_token_id(self):
        ids = self._engine.eos_token_ids
        return ids[0] if ids else None

    @property
    def eos_token(self):
        i = self.eos_token_id
        return None if i is None else self._require().id_to_token(i)

    def apply_chat_template(self, conversation, tools=None, documents=None, chat_template=None,
                            add_generation_prompt=False, continue_final_message=False,
                            tokenize=True, return_dict=False, **kwargs):
        """transformers' apply_chat_template (its defaults: tokenize=True,
        add_generation_prompt=False). Extra keyword arguments (enable_thinking=False, ...) reach
        the template. conversation may be a list of conversations (a list is returned)."""
        if conversation and isinstance(conversation[0], (list, tuple)):
            return [self.apply_chat_template(c, tools, documents, chat_template,
                                             add_generation_prompt, continue_final_message,
                                             tokenize, return_dict, **kwargs)
                    for c in conversation]
        if add_generation_prompt and continue_final_message:
            raise ValueError("continue_final_message and add_generation_prompt are exclusive: "
                             "the first continues the last message, the second starts a new one")
        if documents is not None:
            kwargs["documents"] = documents
        text = self._engine.apply_chat_template(
            json.dumps(list(conversation), ensure_ascii=False),
            json.dumps(tools, ensure_ascii=False), bool(add_generation_prompt),
            json.dumps(kwargs, ensure_ascii=False), chat_template or "")
        if continue_final_message:
            text = _cut_after_final_message(text, conversation[-1])
        if not tokenize:
            return text
        ids = self.encode(text, add_special_tokens=False)  # the template wrote them
        return {"input_ids": ids, "attention_mask": [1] * len(ids)} if return_dict else ids


def _cut_after_final_message(text, message):
    """The rendered text up to the end of the last message's content (what follows it, e.g.
    <|im_end|>, is dropped so that generation continues that message)."""
    content = message["content"]
    if isinstance(content, (list, tuple)):
        content = content[-1]["text"]
    for needle in (content, content.strip()):
        at = text.rfind(needle)
        if needle and at >= 0:
            return text[:at + len(needle)]
    raise ValueError("continue_final_message: the last message's content is not in the "
                     "rendered template")
