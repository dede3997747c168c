"""Reading the real WebShop files, with errors that name the file, the entry and the field.

Files looked up in ``data_dir`` (names of the original release):

- products: ``items_shuffle_1000.json`` (small) or ``items_shuffle.json`` (1.18 M);
- attributes and synthetic instructions: ``items_ins_v2_1000.json`` / ``items_ins_v2.json``;
- human instructions: ``items_human_ins.json`` (optional; used for goals when present).

Products are normalised like the original loader: entries whose asin is "nan" or
longer than 10 characters are skipped, repeated asins keep the first entry, the
first ``num_products`` entries are kept when it is given.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from gigpo_gym.envs.webshop.schema import Instruction, Product, normalize_option_value, parse_pricing

SMALL_PRODUCTS, FULL_PRODUCTS = "items_shuffle_1000.json", "items_shuffle.json"
SMALL_ATTRIBUTES, FULL_ATTRIBUTES = "items_ins_v2_1000.json", "items_ins_v2.json"
HUMAN_INSTRUCTIONS = "items_human_ins.json"
PRODUCT_FIELDS = ("asin", "name", "full_description", "small_description", "pricing", "customization_options",
                  "category", "query", "product_category")  # fmt: skip


class WebShopDataError(ValueError):
    """A real data file is missing or malformed."""


def read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise WebShopDataError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from e


def pick_files(data_dir: Path, num_products: int | None) -> tuple[Path, Path]:
    """The product and attribute files to read: the small pair unless more than 1,000 products are asked for."""
    small = (data_dir / SMALL_PRODUCTS, data_dir / SMALL_ATTRIBUTES)
    full = (data_dir / FULL_PRODUCTS, data_dir / FULL_ATTRIBUTES)
    prefer_small = num_products is None or num_products <= 1000
    for products, attributes in (small, full) if prefer_small else (full, small):
        if products.is_file() and attributes.is_file():
            return products, attributes
    present = sorted(p.name for p in data_dir.iterdir()) if data_dir.is_dir() else []
    raise WebShopDataError(
        f"{data_dir}: needs {SMALL_PRODUCTS} + {SMALL_ATTRIBUTES} or {FULL_PRODUCTS} + {FULL_ATTRIBUTES}; "
        f"found {present[:20]}"
    )


class _Entry:
    """Field access on one product entry that fails with the file, the entry and the field."""

    def __init__(self, path: Path, index: int, raw: Any):
        self.path, self.index, self.raw = path, index, raw
        if not isinstance(raw, dict):
            raise WebShopDataError(f"{path}: entry {index} must be a JSON object, got {type(raw).__name__}")

    def fail(self, field: str, problem: str) -> WebShopDataError:
        asin = self.raw.get("asin")
        return WebShopDataError(f"{self.path}: entry {self.index} (asin {asin!r}): field {field!r} {problem}")

    def get(self, field: str, types: tuple[type, ...], required: bool = True) -> Any:
        if field not in self.raw:
            if not required:
                return None
            close = difflib.get_close_matches(field, [str(k) for k in self.raw], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise self.fail(field, f"is missing{hint}")
        value = self.raw[field]
        if not isinstance(value, types):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise self.fail(field, f"must be {names}, got {type(value).__name__}: {value!r:.60}")
        return value


def _options(entry: _Entry) -> dict[str, tuple[str, ...]]:
    raw = entry.get("customization_options", (dict, type(None)))
    options: dict[str, tuple[str, ...]] = {}
    for name, contents in (raw or {}).items():
        if contents is None:
            continue
        if not isinstance(contents, list) or not all(isinstance(c, dict) and isinstance(c.get("value"), str) for c in contents):
            raise entry.fail("customization_options", f"option {name!r} must be a list of {{'value': str, 'image': ...}}")
        options[str(name).lower()] = tuple(normalize_option_value(c["value"]) for c in contents)
    return options


def load_products(path: Path, attributes: dict[str, Any], num_products: int | None) -> list[Product]:
    """Products of ``path`` (normalised, deduplicated), with attributes from ``items_ins_v2``."""
    raw = read_json(path)
    if not isinstance(raw, list):
        raise WebShopDataError(f"{path}: must hold a JSON list of products, got {type(raw).__name__}")
    if num_products is not None:
        raw = raw[:num_products]
    products, seen = [], set()
    for index, item in enumerate(raw):
        entry = _Entry(path, index, item)
        asin = entry.get("asin", (str,))
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        bullets = entry.get("small_description", (str, list, type(None)))
        bullets = [bullets or ""] if not isinstance(bullets, list) else bullets
        if not all(isinstance(b, str) for b in bullets):
            raise entry.fail("small_description", "must be a string or a list of strings")
        try:
            pricing = parse_pricing(entry.get("pricing", (str, type(None)), required=False))
        except ValueError as e:
            raise entry.fail("pricing", f"is not a '$a' or '$a - $b' price: {e}") from e
        images = entry.get("images", (list, type(None)), required=False) or [None]
        attrs = attributes.get(asin, {})
        products.append(
            Product(
                asin=asin,
                title=entry.get("name", (str,)),
                description=entry.get("full_description", (str, type(None))) or "",
                bullets=tuple(bullets),
                pricing=pricing,
                category=entry.get("category", (str,)),
                query=entry.get("query", (str,)).lower().strip(),
                product_category=entry.get("product_category", (str,)),
                options=_options(entry),
                attributes=tuple(attrs.get("attributes") or ("DUMMY_ATTR",)) if isinstance(attrs, dict) else ("DUMMY_ATTR",),
                image=images[0] if isinstance(images[0], str) else None,
            )
        )
    if not products:
        raise WebShopDataError(f"{path}: no usable product (asins must be at most 10 characters and not 'nan')")
    return products


def _str_list(path: Path, where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise WebShopDataError(f"{path}: {where} must be a list of strings, got {value!r:.60}")
    return tuple(value)


def load_attributes(path: Path) -> dict[str, Any]:
    """``items_ins_v2*.json``: asin -> {attributes, instruction, instruction_attributes}."""
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise WebShopDataError(f"{path}: must hold a JSON object keyed by asin, got {type(raw).__name__}")
    for asin, entry in raw.items():
        if not isinstance(entry, dict):
            raise WebShopDataError(f"{path}: asin {asin!r} must map to an object, got {type(entry).__name__}")
        if "attributes" in entry:
            _str_list(path, f"asin {asin!r} field 'attributes'", entry["attributes"])
    return raw


def synthetic_instructions(path: Path, attributes: dict[str, Any]) -> dict[str, Instruction]:
    """The ``instruction`` / ``instruction_attributes`` of ``items_ins_v2`` per asin."""
    out = {}
    for asin, entry in attributes.items():
        text = entry.get("instruction")
        if text is None:
            continue
        if not isinstance(text, str):
            raise WebShopDataError(f"{path}: asin {asin!r} field 'instruction' must be a string, got {text!r:.60}")
        attrs = _str_list(path, f"asin {asin!r} field 'instruction_attributes'", entry.get("instruction_attributes") or [])
        out[asin] = Instruction(text, attrs, ())
    return out


def load_human_instructions(path: Path) -> dict[str, list[Instruction]]:
    """``items_human_ins.json``: asin -> [{instruction, instruction_attributes, instruction_options}]."""
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise WebShopDataError(f"{path}: must hold a JSON object keyed by asin, got {type(raw).__name__}")
    out: dict[str, list[Instruction]] = {}
    for asin, entries in raw.items():
        if not isinstance(entries, list):
            raise WebShopDataError(f"{path}: asin {asin!r} must map to a list of instructions")
        for k, entry in enumerate(entries):
            where = f"asin {asin!r} instruction {k}"
            if not isinstance(entry, dict) or not isinstance(entry.get("instruction"), str):
                raise WebShopDataError(f"{path}: {where} needs a string field 'instruction'")
            attrs = _str_list(path, f"{where} field 'instruction_attributes'", entry.get("instruction_attributes", []))
            opts = _str_list(path, f"{where} field 'instruction_options'", entry.get("instruction_options", []))
            out.setdefault(asin, []).append(Instruction(entry["instruction"], attrs, opts))
    return out
