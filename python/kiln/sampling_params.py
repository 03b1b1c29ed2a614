"""SamplingParams: vLLM's offline sampling parameters, as far as kiln honours them.

Fields kiln does not implement (beam search, min_tokens, prompt logprobs, ...) are not silently ignored: setting one to anything but its default raises NotImplementedError naming it,
so a vLLM script never gets a result computed under different rules than it asked for.
"""
from __future__ import annotations

import dataclasses
import enum
import json as _json
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _kiln

__all__ = ["SamplingParams", "RequestOutputKind", "StructuredOutputsParams", "GuidedDecodingParams"]


class RequestOutputKind(enum.Enum):
    """What each streamed RequestOutput holds (vLLM's names)."""

    CUMULATIVE = 0  # all text and tokens so far (the default)
    DELTA = 1  # only what is new since the previous output
    FINAL_ONLY = 2  # nothing until the request finishes


# vLLM fields kiln accepts only at these values (name -> default).
_UNSUPPORTED = {
    "best_of": None,
    "min_tokens": 0,
    "prompt_logprobs": None,
    "include_stop_str_in_output": False,
    "bad_words": None,
    "allowed_token_ids": None,
    "logits_processors": None,
    "truncate_prompt_tokens": None,
    "use_beam_search": False,
}


@dataclasses.dataclass
class StructuredOutputsParams:
    """What the output must look like (vLLM's ``StructuredOutputsParams``; give exactly one).

    json: a JSON Schema (a dict, its JSON text, or a pydantic model class); json_object: any JSON
    object; regex: a regular expression the whole output matches; choice: the output is one of these
    strings; grammar: a GBNF grammar (llama.cpp's dialect, rule ``root``). See docs/structured.md
    for the schema keywords and regex constructs kiln honours; others raise ValueError /
    NotImplementedError when the request is submitted.
    """

    json: Optional[Union[str, Dict[str, Any], Any]] = None
    regex: Optional[str] = None
    choice: Optional[List[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None
    backend: Optional[str] = None  # accepted and ignored: kiln has one grammar engine
    disable_fallback: bool = False
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: Optional[str] = None

    def _spec(self):
        """(kind, value, choices) for the engine."""
        if self.whitespace_pattern is not None:
            raise NotImplementedError("StructuredOutputsParams: kiln does not implement 'whitespace_pattern'")
        given = [k for k in ("json", "regex", "choice", "grammar") if getattr(self, k) is not None]
        if self.json_object:
            given.append("json_object")
        if len(given) != 1:
            raise ValueError(f"StructuredOutputsParams: give exactly one of json, json_object, regex, choice, grammar (got {given or 'none'})")
        kind = given[0]
        if kind == "json":
            schema = self.json
            if hasattr(schema, "model_json_schema"):
                schema = schema.model_json_schema()
            text = schema if isinstance(schema, str) else _json.dumps(schema)
            return "json_schema", text, []
        if kind == "json_object":
            return "json_object", "", []
        if kind == "choice":
            if isinstance(self.choice, str) or not all(isinstance(c, str) for c in self.choice):
                raise ValueError("StructuredOutputsParams: choice must be a list of strings")
            return "choice", "", list(self.choice)
        value = getattr(self, kind)
        if not isinstance(value, str):
            raise ValueError(f"StructuredOutputsParams: {kind} must be a string")
        return kind, value, []


# vLLM's older name for the same thing (SamplingParams(guided_decoding=GuidedDecodingParams(...))).
GuidedDecodingParams = StructuredOutputsParams


class SamplingParams:
    """Sampling parameters for one prompt (vLLM's ``SamplingParams``).

    Args:
        n: completions per prompt (choice i is seeded ``seed + i`` when a seed is given).
        temperature: 0 = greedy; higher is more random.
        top_p: nucleus sampling, in (0, 1].
        top_k: keep the k most likely tokens (0 or -1 = off).
        min_p: drop tokens below ``min_p`` times the most likely one's probability.
        repetition_penalty, frequency_penalty, presence_penalty: as in vLLM (1, 0, 0 = off).
        seed: makes sampling reproducible; None = random.
        stop: strings that end the text (left out of it).
        stop_token_ids: token ids that end the text.
        ignore_eos: keep generating past the end-of-sequence token.
        max_tokens: the most tokens to generate (None = up to the context's end).
        logprobs: return each token's log-probability and this many most likely alternatives.
        logit_bias: token id -> bias added to its logit.
        skip_special_tokens: leave control tokens (e.g. "<|im_start|>") out of the text, as vLLM does by
            default; their ids stay in token_ids.
        spaces_between_special_tokens, detokenize: accepted at vLLM's defaults.
        output_kind: what streamed outputs hold (RequestOutputKind).
        structured_outputs (or vLLM's older guided_decoding): a StructuredOutputsParams the output
            must follow; the request finishes with "stop" once the output is complete.
    """

    def __init__(
        self,
        n: int = 1,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repetition_penalty: float = 1.0,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        seed: Optional[int] = None,
        stop: Optional[Union[str, Sequence[str]]] = None,
        stop_token_ids: Optional[Sequence[int]] = None,
        ignore_eos: bool = False,
        max_tokens: Optional[int] = 16,
        logprobs: Optional[int] = None,
        logit_bias: Optional[Dict[int, float]] = None,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        detokenize: bool = True,
        output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE,
        structured_outputs: Optional[StructuredOutputsParams] = None,
        guided_decoding: Optional[StructuredOutputsParams] = None,
        **unsupported: Any,
    ) -> None:
        for name, value in unsupported.items():
            if name not in _UNSUPPORTED:
                raise TypeError(f"SamplingParams() got an unexpected keyword argument '{name}'")
            if value != _UNSUPPORTED[name]:
                raise NotImplementedError(f"SamplingParams: kiln does not implement '{name}' (got {value!r})")
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"SamplingParams: n must be an integer >= 1, got {n!r}")
        if not detokenize:
            raise NotImplementedError("SamplingParams: kiln always detokenizes (detokenize=False)")
        if not isinstance(output_kind, RequestOutputKind):
            raise TypeError(f"SamplingParams: output_kind must be a RequestOutputKind, got {output_kind!r}")
        self.n = n
        self.presence_penalty = presence_penalty
        self.frequency_penalty = frequency_penalty
        self.repetition_penalty = repetition_penalty
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.min_p = min_p
        self.seed = seed
        self.stop: List[str] = [stop] if isinstance(stop, str) else list(stop or [])
        self.stop_token_ids: List[int] = list(stop_token_ids or [])
        self.ignore_eos = ignore_eos
        self.max_tokens = max_tokens
        self.logprobs = logprobs
        self.logit_bias: Dict[int, float] = dict(logit_bias or {})
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        self.detokenize = detokenize
        self.output_kind = output_kind
        if structured_outputs is not None and guided_decoding is not None:
            raise ValueError("SamplingParams: give structured_outputs or guided_decoding, not both")
        self.structured_outputs = structured_outputs if structured_outputs is not None else guided_decoding
        if self.structured_outputs is not None and not isinstance(self.structured_outputs, StructuredOutputsParams):
            raise TypeError("SamplingParams: structured_outputs must be a StructuredOutputsParams")
        self._native()  # range checks now, not at submission

    def _native(self) -> "_kiln.NativeSamplingParams":
        """The engine's form (seed for choice 0); raises ValueError / TypeError for bad values."""
        p = _kiln.NativeSamplingParams()
        try:
            p.temperature = float(self.temperature)
            p.top_k = int(self.top_k)
            p.top_p = float(self.top_p)
            p.min_p = float(self.min_p)
            p.repetition_penalty = float(self.repetition_penalty)
            p.frequency_penalty = float(self.frequency_penalty)
            p.presence_penalty = float(self.presence_penalty)
            p.logit_bias = [(int(k), float(v)) for k, v in self.logit_bias.items()]
            if self.seed is not None:
                p.seed = int(self.seed) % (1 << 64)  # negative seeds wrap, as the server's
                p.has_seed = True
            # None: until EOS or the context's end (the engine stops there)
            p.max_tokens = (1 << 31) - 1 if self.max_tokens is None else int(self.max_tokens)
            p.stop = [str(s) for s in self.stop]
            p.stop_token_ids = [int(t) for t in self.stop_token_ids]
            p.ignore_eos = bool(self.ignore_eos)
            p.skip_special_tokens = bool(self.skip_special_tokens)
            p.logprobs = -1 if self.logprobs is None else int(self.logprobs)
            if self.structured_outputs is not None:
                p.structured_kind, p.structured_value, p.structured_choices = self.structured_outputs._spec()
        except (TypeError, OverflowError) as e:
            raise ValueError(f"SamplingParams: {e}") from None
        p.validate()
        return p

    def clone(self) -> "SamplingParams":
        c = SamplingParams.__new__(SamplingParams)
        c.__dict__.update(self.__dict__)
        c.stop = list(self.stop)
        c.stop_token_ids = list(self.stop_token_ids)
        c.logit_bias = dict(self.logit_bias)
        return c

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"SamplingParams({fields})"
