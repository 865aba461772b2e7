"""transformers generation engine: the reference the vLLM engine is checked against, and the fallback
when vLLM is not installed. Plain `model.generate` on left-padded batches."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from rlep.tasks.engines.base import Completion
from rlep.tasks.settings.engine import EngineConfig, SamplingConfig

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class TransformersEngine:
    """`GenerationEngine` backed by `transformers.AutoModelForCausalLM.generate`."""

    name = "transformers"

    def __init__(self, model: str | Path, config: EngineConfig) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config = config
        self.tokenizer = AutoTokenizer.from_pretrained(str(model))
        self.tokenizer.padding_side = "left"
        dtype = _DTYPES.get(config.dtype, "auto")
        self.model = AutoModelForCausalLM.from_pretrained(str(model), dtype=dtype)
        self.model.eval()
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device)
        if config.seed is not None:
            torch.manual_seed(config.seed)

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[str], sampling: SamplingConfig, progress: bool = False
    ) -> list[list[Completion]]:
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        per_call = max(1, self.config.hf_batch_size // sampling.n)
        results: list[list[Completion]] = []
        starts = range(0, len(prompts), per_call)
        if progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="generate (transformers)", unit="batch")
        for start in starts:
            results.extend(self._generate_batch(list(prompts[start : start + per_call]), sampling))
        return results

    def _generate_batch(self, prompts: list[str], sampling: SamplingConfig) -> list[list[Completion]]:
        encoded = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        greedy = sampling.temperature == 0
        out = self.model.generate(
            **encoded,
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None,
            num_return_sequences=sampling.n,
            max_new_tokens=sampling.max_tokens,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
        )
        new_tokens = out.sequences[:, encoded.input_ids.shape[1] :]
        # Processed scores (after temperature and top-p): the sampling distribution, the same convention as
        # the vLLM engine's behaviour log-probs (`logprobs_mode="processed_logprobs"`).
        logprobs = torch.stack(out.scores, dim=1).float().log_softmax(-1)
        token_logprobs = logprobs.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        results: list[list[Completion]] = []
        for i in range(len(prompts)):
            prompt_ids = encoded.input_ids[i][encoded.attention_mask[i].bool()].tolist()
            completions = []
            for j in range(sampling.n):
                row = i * sampling.n + j
                completions.append(
                    self._completion(new_tokens[row].tolist(), token_logprobs[row].tolist(), sampling, prompt_ids)
                )
            results.append(completions)
        return results

    def _completion(
        self, ids: list[int], logprobs: list[float], sampling: SamplingConfig, prompt_ids: list[int]
    ) -> Completion:
        eos = self.tokenizer.eos_token_id
        finish = "length"
        if eos in ids:
            ids, logprobs, finish = ids[: ids.index(eos) + 1], logprobs[: ids.index(eos) + 1], "stop"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if sampling.stop:
            # Cut at the first token whose text completes a stop string (vLLM drops the stop string too).
            for k in range(1, len(ids) + 1):
                prefix = self.tokenizer.decode(ids[:k], skip_special_tokens=True)
                hits = [prefix.find(s) for s in sampling.stop if s in prefix]
                if hits:
                    ids, logprobs, text, finish = ids[:k], logprobs[:k], prefix[: min(hits)], "stop"
                    break
        return Completion(
            text=text, token_ids=ids, logprobs=logprobs, finish_reason=finish, prompt_token_ids=prompt_ids
        )

    @property
    def weight_dtype(self) -> torch.dtype:
        return self.model.dtype

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Each tensor copied into its parameter as it comes (converted to the model's dtype): nothing collected."""
        params = self.model.state_dict()
        for name, tensor in weights:
            if name not in params:
                raise ValueError(f"weight not in this model: {name}")
            params[name].copy_(tensor)

    def sleep(self) -> None:
        """Nothing to release: transformers has no sleep mode."""

    def close(self) -> None:
        del self.model
