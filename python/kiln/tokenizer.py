"""kiln.Tokenizer: the model's tokenizer, with the calls a vLLM / Hugging Face script makes."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

from ._core import Core, Message

__all__ = ["Tokenizer"]


class Tokenizer:
    """The tokenizer of a loaded model (``LLM.get_tokenizer()``): kiln's own byte-level or
    SentencePiece BPE, the one the engine uses."""

    def __init__(self, core: Core) -> None:
        self._core = core

    @property
    def bos_token_id(self) -> Optional[int]:
        return None if self._core.info.bos_id < 0 else self._core.info.bos_id

    @property
    def eos_token_id(self) -> Optional[int]:
        return None if self._core.info.eos_id < 0 else self._core.info.eos_id

    @property
    def vocab_size(self) -> int:
        return self._core.info.vocab_size

    @property
    def chat_template(self) -> Optional[str]:
        return self._core.info.chat_template or None

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """Token ids of `text`; add_special_tokens adds the model's BOS (and EOS) as it is configured
        to. Special tokens written in the text (e.g. "<|im_start|>") are parsed as such."""
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a string, got {type(text).__name__}")
        return self._core.engine.tokenize(text, bool(add_special_tokens), True)

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of `token_ids` (bytes that are not valid UTF-8 become U+FFFD); skip_special_tokens
        leaves control tokens out."""
        ids = [int(t) for t in token_ids]
        return self._core.engine.detokenize(ids, bool(skip_special_tokens)).decode("utf-8", "replace")

    def convert_ids_to_tokens(self, token_ids: Union[int, Sequence[int]]) -> Union[str, List[str]]:
        """Each id's text (its bytes as UTF-8, U+FFFD where they split a character)."""
        if isinstance(token_ids, int):
            return self._core.token_text(token_ids)
        return [self._core.token_text(int(t)) for t in token_ids]

    def apply_chat_template(self, conversation: Sequence[Message], tokenize: bool = True,
                            add_generation_prompt: bool = False, chat_template: Optional[str] = None,
                            **kwargs: Any) -> Union[str, List[int]]:
        """The conversation rendered with the model's chat template (or `chat_template`), as Hugging
        Face's method: token ids by default (no BOS/EOS added: the template writes them), the text
        with tokenize=False; `tools=` and any other keyword (enable_thinking=...) reach the template."""
        tools = kwargs.pop("tools", None)
        template_vars = {k: v for k, v in kwargs.items() if k not in ("continue_final_message", "return_dict",
                                                                     "return_assistant_tokens_mask", "documents")}
        for k in ("continue_final_message", "return_dict", "return_assistant_tokens_mask", "documents"):
            if kwargs.get(k) not in (None, False):
                raise NotImplementedError(f"apply_chat_template: kiln does not implement '{k}'")
        text = self._core.render_chat(conversation, add_generation_prompt, chat_template, tools, template_vars or None)
        if not tokenize:
            return text
        return self._core.engine.tokenize(text, False, True)

    def __len__(self) -> int:
        return self.vocab_size
