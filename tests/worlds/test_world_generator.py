"""Seeded generation and the held-out (shape x entity) split."""

from collections import Counter

from envace.worlds import domain_names, generate_tasks, get_domain, held_out_pairs, task_pairs


def test_generation_is_deterministic_in_the_seed():
    a = generate_tasks(54, "train", seed=5)
    b = generate_tasks(54, "train", seed=5)
    c = generate_tasks(54, "train", seed=6)
    assert a == b
    assert [t.messages for t in a] != [t.messages for t in c]
    assert len({t.uuid for t in a}) == 54


def test_every_domain_shape_is_equally_represented(split_tasks):
    counts = Counter((t.domain, t.meta["shape"]) for t in split_tasks["train"])
    assert len(counts) == sum(len(get_domain(d).shapes) for d in domain_names()) == 18
    assert set(counts.values()) == {len(split_tasks["train"]) // 18}


def test_held_out_pairs_are_two_per_shape_and_seed_free():
    held = held_out_pairs()
    for name in domain_names():
        per_shape = Counter(shape for shape, _ in held[name])
        assert per_shape == {s.name: 2 for s in get_domain(name).shapes}
    assert held == held_out_pairs()


def test_test_pairs_never_occur_in_train_or_val(split_tasks):
    held = held_out_pairs()
    train_val_pairs = {(t.domain, *p) for s in ("train", "val") for t in split_tasks[s] for p in task_pairs(t)}
    test_held = set()
    for t in split_tasks["test"]:
        mine = task_pairs(t) & held[t.domain]
        assert mine, f"{t.uuid} holds no held-out pair"
        test_held |= {(t.domain, *p) for p in mine}
    assert not (train_val_pairs & {(d, *p) for d in held for p in held[d]})
    assert not (train_val_pairs & test_held)
    # every held-out pair is actually exercised by the test split
    assert test_held == {(d, *p) for d in held for p in held[d]}


def test_every_entity_still_appears_in_training_through_other_shapes(split_tasks):
    seen = {(t.domain, e) for t in split_tasks["train"] for _, e in task_pairs(t)}
    for name in domain_names():
        d = get_domain(name)
        used_vocabs = {s.vocab for s in d.shapes}
        for vocab in used_vocabs:
            for entity in d.vocab[vocab]:
                assert (name, entity) in seen, f"{name}:{entity} never appears in train"


def test_no_test_request_repeats_a_training_request(split_tasks):
    train_texts = {m.content for t in split_tasks["train"] for m in t.messages if m.role == "user"}
    leaked = [t.user_turns[0] for t in split_tasks["test"] if t.user_turns[0] in train_texts]
    assert not leaked, leaked[:5]


def test_task_record_shape(split_tasks):
    for t in split_tasks["val"][:18]:
        assert t.messages[0].role == "system" and t.messages[1].role == "user"
        assert t.tools == get_domain(t.domain).toolkit_cls.schemas()
        assert len(t.checklists) == len(t.user_turns) == len(t.meta["answers"])
        assert t.meta["split"] == "val" and t.meta["shape"]
        for turn in t.checklists:
            assert abs(sum(i.weight for i in turn) - 1.0) < 1e-9
    two = [t for t in split_tasks["val"] if t.meta["shape"] == "two_turn"]
    assert two and all(len(t.user_turns) == 2 for t in two)
    # the second turn's call uses the id returned in the first turn, so that item is required
    for t in two:
        assert t.checklists[0][0].required_for_next_turn
        assert t.checklists[1][0].dependence == [t.checklists[0][0].id]
