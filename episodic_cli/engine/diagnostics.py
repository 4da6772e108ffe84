"""What `epi doctor` checks, as plain rows (what, value, ok-or-None); the CLI renders them."""
from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from importlib import metadata

from .. import __version__
from ..store import Store, StoreBusyError, StoreDamagedError, StoreError
from ..store.kv_tier import KVSpace
from ..store.damage import readable_parts
from ..store.episodic_store import DB_NAME
from .documents import page_ocr
from .embed.embedder import EMBEDDER_NAME
from .errors import EpiError
from .kv.keys import k_shift_left_to_llama_cpp, rope_params
from .llama.backend import LlamaModel, default_threads, gpu_offload_supported, llama_cpp_version, system_info
from .llama import layer_visibility
from .llama.bundled import BUNDLED, BundledModel, assemble, is_installed
from .llama.bundled import verify as bundled_verify
from .paths import cache_dir, data_dir, store_path
from .workspace import Workspace

PINNED_LLAMA_CPP = "0.3.36"
# install.sh's builds label their patch level: +epi1 has layer-visibility.patch, +epi2 also flash-decode.patch's
# decode kernel, +epi3 also its kernel for prompts (a question decoded as one batch)
FLASH_DECODE_PATCH_LEVEL = 2
PROMPT_KERNEL_PATCH_LEVEL = 3
# `doctor --quick` compares this many of the index's vectors (chosen at random) with SQLite's instead of all: ~0.1 s.
INDEX_SAMPLE = 1000


def patch_level(version: str) -> int:
    """epi's patch level in a llama-cpp-python version: 0.3.36+epi2 -> 2, an unpatched 0.3.36 -> 0."""
    m = re.search(r"\+epi(\d+)$", version)
    return int(m.group(1)) if m else 0


def layered_attention() -> str:
    """What this build offers `--layered`, and what to do when it is missing or dated."""
    if not layer_visibility.available():
        return "not in this build (llama.cpp without epi's patch): `--layered` is off; ./install.sh builds the patched one"
    level = patch_level(llama_cpp_version())
    if level < FLASH_DECODE_PATCH_LEVEL:
        return ("available, but this build predates epi's flash-decode kernel: a `--layered` token costs ~1.2x kv "
                "mode's on CPU instead of ~0.9x; ./install.sh rebuilds it")
    if level < PROMPT_KERNEL_PATCH_LEVEL:
        return ("available, but this build predates epi's flash kernel for prompts: `--layered` reads a question "
                "~2x slower on CPU than it could; ./install.sh rebuilds it")
    return "available: `--layered` lets each layer attend to the blocks it selects"


def block_moves(model: LlamaModel) -> str:
    """How KV blocks loaded at new positions get their keys rotated with this model (engine/kv/keys.py, k_shift)."""
    reason = k_shift_left_to_llama_cpp(rope_params(model), model)
    if reason is None:
        return "native: K is rotated to a block's new place as it loads (plain RoPE, KV cache on the CPU)"
    return f"by llama.cpp's K-shift inside the first decode: {reason}"


def bundled_model_row(model: BundledModel, verify: bool, repair: bool) -> tuple[str, str, bool | None]:
    """Whether a bundled answer model is installed and assembled intact (hashed whole unless --quick)."""
    label = f"model {model.name}"
    if not is_installed(model):
        return (label, f"{model.describe()}: not installed ({model.install})", None)
    try:
        path = assemble(model)
    except EpiError as exc:
        return (label, str(exc), False)
    if not verify:
        return (label, f"{model.describe()}: {path} (size and record match; --quick skipped the hash)", True)
    damage = bundled_verify(model)
    if damage is None:
        return (label, f"{model.describe()}: {path}, SHA-256 matches Qwen's published hash", True)
    if repair:
        path.unlink(missing_ok=True)
        return (label, f"{damage}; removed: it is assembled again from its packages on next use", True)
    return (label, f"{damage}; run `epi doctor --repair` to assemble it again", False)


def ocr_row() -> tuple[str, str, bool | None]:
    """OCR for scanned PDF pages: an optional extra, so its absence is news, not a fault."""
    try:
        if not page_ocr.available():
            return ("ocr", f"not installed: scanned PDF pages are named at ingest, not read; {page_ocr.OCR_HINT}", None)
    except page_ocr.OcrModelError as exc:
        return ("ocr", str(exc), False)
    return ("ocr", f"RapidOCR {_version('rapidocr-onnxruntime')}, models' SHA-256 checked", True)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


ByteProgress = Callable[[int], AbstractContextManager[Callable[[int], None]]]  # total bytes -> advance(n)


def collect(model: str | None, store: str | None, verify_blocks: bool = True, repair: bool = False,
            progress: ByteProgress | None = None) -> list[tuple[str, str, bool | None]]:
    rows: list[tuple[str, str, bool | None]] = [
        ("epi", __version__, None),
        ("python", f"{sys.version.split()[0]} on {platform.system()} {platform.machine()}", None),
        # epi's patched build carries a local label (0.3.36+epi2): the same release, built with the patches
        ("llama-cpp-python", llama_cpp_version(), llama_cpp_version().split("+")[0] == PINNED_LLAMA_CPP),
    ]
    for dist in ("tokenizers", "hnswlib", "pypdf", "ebooklib", "python-docx", "lxml", "watchfiles"):
        v = _version(dist)
        rows.append((dist, v, v != "not installed"))
    rows.append(ocr_row())
    info = system_info()
    features = [part.split(" = ")[0].split(":")[-1].strip() for part in info.split("|") if part.strip().endswith("= 1")]
    rows += [
        ("cpu features", " ".join(features) or info, None),
        ("threads", f"{default_threads()} (override with --threads)", None),
        ("gpu offload", "available: all layers are offloaded" if gpu_offload_supported()
         else "not in this build (CPU only); see README 'GPU builds'", None),
        ("layered attention", layered_attention(), None),
        ("data dir", str(data_dir()), None),
        ("cache dir", str(cache_dir()), None),
    ]
    rows += [bundled_model_row(m, verify=verify_blocks, repair=repair) for m in BUNDLED.values()]
    ws = Workspace(model, store)
    try:
        prepared = ws.prepared
        m = ws.model
        rows += [
            ("model", f"{m.info.name} ({m.info.architecture}, {m.info.n_layer} layers, {m.info.n_head_kv} KV heads, "
                      f"{m.info.n_params / 1e6:.0f}M params, trained context {m.info.n_ctx_train})", True),
            ("model file", f"{prepared.path} [{prepared.form}]", None),
            ("kv block moves", block_moves(m), None),
        ]
    except EpiError as exc:
        rows.append(("model", str(exc), False))
    try:
        # Ingest embeds padded batches, a question is embedded alone: padding must change nothing (the attention
        # mask), or questions and events would be compared as unlike things. The model files were hash-checked.
        texts = ["doctor", "a longer text, so that the first one is padded in the batch"]
        cosine = float(ws.embedder.embed_texts(texts)[0] @ ws.embedder.embed_query(texts[0]))
        rows.append(("embedder", f"{ws.embedder.name} ({ws.embedder.dim}-d, numpy), offline, files as published; a "
                     f"padded batch agrees with a single text (cosine {cosine:.6f})", cosine > 0.9999))
    except Exception as exc:  # noqa: BLE001 - any failure here is what doctor must report, not raise
        rows.append(("embedder", f"failed to load: {exc}", False))
    path = store_path(store)
    if not (path / DB_NAME).exists():
        if store is None and not os.environ.get("EPI_STORE"):  # the default store, before a first ingest: fine
            rows.append(("store", f"{path} does not exist yet (created by `epi ingest`)", None))
        else:  # a store the user named: the same words and exit code as every other command
            rows.append(("store", f"no store at {path}; run `epi ingest` first", False))
        return rows
    try:
        with Store.open_existing(path) as st:
            stats = st.stats()
            problems = st.health()
            rows.append(("store", f"{path}: {stats['n_documents']} documents, {stats['n_events']} events, "
                                  f"{stats['n_tokens']} tokens", not problems))
            rows += [("store problem", p, False) for p in problems]
            try:
                ws.check_store(st)
                if st.identity.embedder == EMBEDDER_NAME:
                    rows.append(("store embedder", "matches the embedder in use", True))
                else:  # a store made before token windows: it keeps working, with the windows it was made with
                    rows.append(("store embedder", f"{st.identity.embedder}: 160-word windows, as when it was made "
                                 "(a long event's tail past 256 word pieces is not embedded); a store made by "
                                 "this epi uses 256-piece windows", True))
            except StoreError as exc:
                rows.append(("store embedder", str(exc), False))
            rows.append(_event_checksum_row(st))
            rows.append(_index_row(st, sample=None if verify_blocks else INDEX_SAMPLE, repair=repair))
            space = st.kv_space()
            rows += _leftover_rows(st, space, repair)
            rows.append(_kv_budget_row(space, repair))
            if verify_blocks:
                rows.append(_kv_block_row(st, repair, progress))
    except StoreDamagedError as exc:
        rows += damaged_store_rows(path, exc, repair)
    except StoreError as exc:
        rows.append(("store", str(exc), False))
    return rows


def damaged_store_rows(path, exc: StoreDamagedError, repair: bool) -> list[tuple[str, str, bool | None]]:
    """A damaged database: what SQLite said, what can still be read, and what to do (doctor never rewrites it)."""
    rows: list[tuple[str, str, bool | None]] = [
        ("store", f"{path}: the database file is damaged ({exc.__cause__ or exc}); nothing was changed", False)]
    rows += [("store readable", line, None) for line in readable_parts(path, DB_NAME)]
    not_repaired = "--repair does not rewrite a damaged database: " if repair else ""
    rows.append(("store repair", f"{not_repaired}re-ingest the documents into --store NEW (`epi ls` and `epi show` "
                                 "still read what is listed as readable here)", False))
    return rows


def _named_events(st: Store, ids: list[int]) -> str:
    """'event 12 of book.pdf; event 40 of notes.md and 3 more': the first five of `ids`, with their documents."""
    named = [f"event {ev.id} of {st.get_document(ev.document_id).display_path}" for ev in st.get_events(ids[:5])]
    return "; ".join(named) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def _event_checksum_row(st: Store) -> tuple[str, str, bool]:
    """Every event's text and anchors against its checksum: SQLite's integrity_check passes a page whose cells were
    altered in place, and the altered text would be quoted and answered from."""
    damaged = st.damaged_events()
    if not damaged:
        return ("event checksums", f"all {st.stats()['n_events']:,} events match their checksums", True)
    named = "; ".join(f"event {event_id} of {doc}" for event_id, doc in damaged[:5])
    more = f" and {len(damaged) - 5} more" if len(damaged) > 5 else ""
    docs = sorted({doc for _, doc in damaged})
    return ("event checksums", f"{len(damaged)} damaged event(s), their text or place altered: {named}{more}. Ingest "
                               f"{', '.join(docs[:3])}{' ...' if len(docs) > 3 else ''} again (same store) to restore "
                               "them; until then they are refused where read", False)


def _index_row(st: Store, sample: int | None, repair: bool) -> tuple[str, str, bool]:
    """Whether the dense index holds, under each event's id, the vector SQLite has for it: a damaged index.hnsw with
    the right labels and size is otherwise read as is, and changes which events answer."""
    checked, differing = st.index_differences(sample)
    what = f"{checked:,} vectors (a random sample: --quick)" if sample is not None else f"all {checked:,} vectors"
    if not differing:
        return ("dense index", f"{what} match the embeddings in SQLite", True)
    found = f"{len(differing)} of {what} differ from the embeddings in SQLite ({_named_events(st, differing)})"
    if repair:
        st.rebuild_index()
        return ("dense index", f"{found}; rebuilt it from SQLite", True)
    return ("dense index", f"{found}: questions would find the wrong events. Run `epi doctor --repair` to rebuild it",
            False)


def _mb(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:,.1f} MB"


def _leftover_rows(st: Store, space: KVSpace, repair: bool) -> list[tuple[str, str, bool | None]]:
    """What interrupted or overtaken work left: temporary files of writes cut short (removed: nothing uses them),
    and blocks no event names any more (a document removed while an answer prepared its blocks)."""
    try:
        with st.writer():  # an ingest's blocks exist before its commit names them: judge them only between writers
            temporaries = st.remove_leftover_temporaries()
            space.used_bytes()  # counting the blocks removes the temporary block files of interrupted writes
            temporaries += space.temporaries_removed
            n_dead, dead_bytes = st.kv_garbage()
            if n_dead and repair:
                st.collect_kv_garbage()
    except StoreBusyError:
        return [("leftovers", "not checked: another epi process is writing the store", None)]
    rows: list[tuple[str, str, bool | None]] = []
    if temporaries:
        names = ", ".join(p.name for p, _ in temporaries[:3]) + (" ..." if len(temporaries) > 3 else "")
        rows.append(("leftovers", f"removed {len(temporaries)} temporary file(s) of interrupted writes "
                                  f"({_mb(sum(n for _, n in temporaries))}: {names})", True))
    if n_dead:
        found = f"{n_dead} KV block(s) ({_mb(dead_bytes)}) of events no longer in the store"
        rows.append(("leftovers", f"{found}: removed" if repair else
                     f"{found}. Run `epi doctor --repair` (or `epi compact`) to remove them", repair))
    return rows


def _kv_budget_row(space: KVSpace, repair: bool) -> tuple[str, str, bool]:
    """Whether the KV tiers' files fit the store's budget: writers keep to it, but files copied in, or written by
    an older epi that read the budget once per run, can exceed it, and then no new block is ever kept."""
    used, budget, over = space.used_bytes(), space.budget, space.over_budget()
    if not over:
        return ("kv budget", f"blocks use {_mb(used)} of the {_mb(budget)} budget", True)
    found = f"blocks use {_mb(used)}, {_mb(over)} over the {_mb(budget)} budget"
    if repair:
        removed = space.shrink_to_budget()
        return ("kv budget", f"{found}: evicted {_mb(removed)} of least recently used blocks", True)
    return ("kv budget", f"{found}, so no new block can be kept. Run `epi doctor --repair` to evict least recently "
                         "used blocks down to it, or raise it with `epi config --kv-budget SIZE`", False)


def _kv_block_row(st: Store, repair: bool, progress: ByteProgress | None) -> tuple[str, str, bool]:
    """Read every KV block of every tier and check it; name the events of damaged ones and how to repair them."""
    space = st.kv_space()
    files = list(space.block_files())
    total = sum(f.size for f in files)
    with (progress(total) if progress else nullcontext(lambda n: None)) as advance:
        damaged = space.verify(advance)
    if not damaged:
        return ("kv blocks", f"{len(files):,} blocks checked, all intact", True)
    events = st.events_by_block_key()
    named = []
    for f, reason in damaged[:5]:
        event = events.get(f.key)
        named.append(f"event {event[0]} of {event[1]} ({reason})" if event else f"{f.path.name} ({reason})")
    more = f" and {len(damaged) - 5} more" if len(damaged) > 5 else ""
    if repair:
        space.remove_files([f for f, _ in damaged])
        return ("kv blocks", f"removed {len(damaged)} damaged block(s): {'; '.join(named)}{more}; their events are "
                             "prepared again from text the next time a question needs them", True)
    return ("kv blocks", f"{len(damaged)} damaged block(s): {'; '.join(named)}{more}. Run `epi doctor --repair` to "
                         "remove them (they are rebuilt from the text on next use)", False)
