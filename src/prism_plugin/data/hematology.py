"""White-blood-cell datasets of the hematology acquisition-shift audit (papers/002).

The audit evaluates frozen encoders on the five-class WBC intersection (WBC5: neutrophil, lymphocyte, monocyte,
eosinophil, basophil) of four acquisition domains -- Acevedo (PBC, via BloodMNIST at 224 px; CellaVision DM96),
Matek (LMU), MLL23 (Metafer) and Raabin (smartphone + Olympus) -- with an image-level stratified 70/30 split per
dataset (5 split seeds; the 30 % is the in-domain test and the split on which the source temperature is fitted) and
the full 4 x 4 source -> target matrix evaluated on the target's held-out 30 %.

The task files (``tasks/hematology/``) carry each dataset's ``class_map`` from its own class names to WBC5; this
module holds the same maps as the reference for tests and documentation, plus the BloodMNIST label names.
"""

from __future__ import annotations

from typing import Mapping

WBC5 = ("neutrophil", "lymphocyte", "monocyte", "eosinophil", "basophil")

#: MedMNIST v2 BloodMNIST integer labels 0..7 (the Acevedo / PBC classes).
BLOODMNIST_LABELS = ("basophil", "eosinophil", "erythroblast", "ig", "lymphocyte", "monocyte", "neutrophil",
                     "platelet")
#: BloodMNIST (all three MedMNIST splits pooled) per-class counts of the WBC5 classes, in WBC5 order:
#: 10,298 images, the audit's Acevedo source size.
BLOODMNIST_WBC5_COUNTS = (3329, 1214, 1420, 3117, 1218)

#: dataset -> {WBC5 class: [the dataset's own class names]}. Classes outside WBC5 are dropped.
CLASS_MAPS: dict[str, dict[str, list[str]]] = {
    # PBC / BloodMNIST: "neutrophil" pools band and segmented neutrophils; ig, erythroblast, platelet dropped.
    "acevedo": {c: [c] for c in WBC5},
    # AML-Cytomorphology_LMU (Matek et al.) abbreviations: NGS segmented / NGB band neutrophil, LYT typical
    # lymphocyte (atypical LYA dropped), MON monocyte, EOS eosinophil, BAS basophil.
    "matek": {"neutrophil": ["NGS", "NGB"], "lymphocyte": ["LYT"], "monocyte": ["MON"], "eosinophil": ["EOS"],
              "basophil": ["BAS"]},
    # MLL23 class folders: segmented + band neutrophils, typical lymphocytes (reactive/neoplastic dropped).
    "mll23": {"neutrophil": ["neutrophil_segmented", "neutrophil_band"], "lymphocyte": ["lymphocyte_typical"],
              "monocyte": ["monocyte"], "eosinophil": ["eosinophil"], "basophil": ["basophil"]},
    # Raabin-WBC: exactly the five classes, capitalised folder names.
    "raabin": {"neutrophil": ["Neutrophil"], "lymphocyte": ["Lymphocyte"], "monocyte": ["Monocyte"],
               "eosinophil": ["Eosinophil"], "basophil": ["Basophil"]},
}
DISPLAY = {"acevedo": "Acevedo", "matek": "Matek", "mll23": "MLL23", "raabin": "Raabin"}


def wbc5_label(dataset: str, raw_class: str) -> int | None:
    """WBC5 index of one of ``dataset``'s own class names (None = not a WBC5 class)."""
    for cname, raws in CLASS_MAPS[dataset].items():
        if raw_class in raws:
            return WBC5.index(cname)
    return None


def check_wbc5_map(class_map: Mapping[str, list]) -> list[str]:
    """Problems with a class map to WBC5 (empty when it covers all five classes, each raw name once)."""
    problems = []
    missing = [c for c in WBC5 if c not in class_map]
    if missing:
        problems.append(f"WBC5 classes without raw names: {missing}")
    extra = [c for c in class_map if c not in WBC5]
    if extra:
        problems.append(f"not WBC5 classes: {extra}")
    seen: dict[str, str] = {}
    for cname, raws in class_map.items():
        for r in raws:
            if r in seen:
                problems.append(f"raw class {r!r} mapped to both {seen[r]} and {cname}")
            seen[r] = cname
    return problems
