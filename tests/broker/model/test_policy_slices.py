"""Policy matching and application cost bounded work per loop turn (isolation issue, case 1).

A policymaker's pattern `(.*)` x 240 + `b` over 40 queues with 255-byte names held the event
loop for 39 s: each name cost O(program x length) NFA steps, all in one call.  Now a pattern is
a lazily built DFA (a name costs O(length) once its states are cached, the cache is bounded),
and a policy change is applied in slices of bounded work, installed when every entity has been
evaluated.  The random tables hold the sliced, incremental application to the plain rule
(POL-2: every entity gets ``best_match`` over the vhost's table), with declares and deletes
between slices.
"""

import random
import re

import pytest
from hutch_broker.model import automata, patterns, policies, policychanges
from hutch_broker.model.broker import Broker
from hutch_broker.model.vhosts import VirtualHost

ATTACK_PATTERN = "(.*)" * 240 + "b"


def attack_names(count: int = 40) -> list[str]:
    return [f"q{index:03d}-" + "a" * 250 + "b" for index in range(count)]


def test_the_attack_pattern_costs_a_few_units_per_character_once_compiled():
    matcher = patterns.compile_pattern(ATTACK_PATTERN)
    names = attack_names()
    matcher.begin(names[0]).advance()  # the first name computes the few states all share

    costs = []
    for name in names[1:]:
        search = matcher.begin(name)
        costs.append(search.advance())
        assert search.result is True
    assert max(costs) <= 2 * len(names[0]) + 2  # one or two dict lookups per character
    assert isinstance(matcher, automata.Automaton)
    assert matcher.cached()[0] <= 8  # states: the attack's DFA is tiny


def test_the_attack_pattern_over_40_long_names_costs_one_lookup_per_character():
    """Counted, not timed (39 s before): after the first name has built the few states all
    share, every name costs at most two units per character, not the whole program's."""
    candidate = policies.Policy("/", "slow", ATTACK_PATTERN, {"max-length": 1})
    names = attack_names()
    first = candidate._matcher.begin(names[0])
    costs = [first.advance()]
    for name in names[1:]:
        search = candidate._matcher.begin(name)
        costs.append(search.advance())
        assert search.result is True
    assert sum(costs[1:]) <= 39 * (2 * len(names[0]) + 2), costs
    assert all(candidate.matches(name, "queue") for name in names)


@pytest.mark.parametrize(
    ("pattern", "oracle"),
    [
        ("(a|b)*a(a|b){12}c", "(a|b)*a(a|b){12}c"),
        ("(a|b)*a(.*)(a|b){100}c", "a.*[ab]{100}c"),
        (r"\b(a|b)*a(a|b){12}$", r"\b(a|b)*a(a|b){12}$"),
        (ATTACK_PATTERN, "b"),  # what it means; `re` itself would backtrack for hours
    ],
)
def test_a_search_advances_in_slices_and_each_slice_is_bounded(pattern, oracle):
    """Patterns whose DFA is exponential thrash the bounded cache: still bounded per slice."""
    matcher = patterns.compile_nfa(pattern)
    program = matcher.program
    one_step = (
        automata.STEP_UNITS
        + automata.INSTRUCTION_UNITS * 3 * len(program.ops)  # start bits, visits, live ones
        + automata.TEST_UNITS * (len(program.tests) + 1)
    )
    rng = random.Random(7)
    slices = 0
    for _ in range(10):
        name = "".join(rng.choice("ab") for _ in range(254)) + "c"
        search = matcher.begin(name)
        while search.result is None:
            spent = search.advance(2_000)
            slices += 1
            assert spent <= 2_000 + one_step  # the budget, overrun by one step at most
        assert search.result is (re.search(oracle, name) is not None)
    assert slices > 10  # about 20 slices a name, each bounded by its budget (above)
    states, steps, characters = matcher.cached()
    assert states <= automata.MAX_STATES
    assert steps <= automata.MAX_TRANSITIONS
    assert characters <= automata.MAX_CHARACTERS


def test_the_character_cache_is_bounded_whatever_the_alphabet():
    matcher = patterns.compile_nfa("(a|[\u0100-\u7fff])*x(.*)y")  # means: an x, later a y
    rng = random.Random(3)
    for _ in range(40):
        name = "".join(chr(rng.randrange(0x100, 0xFFFF)) for _ in range(250)) + rng.choice("xy")
        assert matcher.search(name) is (re.search("x.*y", name) is not None)
    assert matcher.cached()[2] <= automata.MAX_CHARACTERS


@pytest.mark.parametrize("seed", range(6))
def test_resumed_searches_agree_with_re_search(seed):
    rng = random.Random(seed)
    atoms = ["a", "b", ".", "[ab]", r"\w", "^", "$", r"\b", "(a|b)", "(ab|a)"]
    for _ in range(30):
        pattern = "".join(
            rng.choice(atoms) + rng.choice(["", "*", "+", "?", "{2}"]) for _ in range(4)
        )
        try:
            regex = re.compile(pattern)
            matcher = patterns.compile_nfa(pattern)
        except (re.error, patterns.PatternError):
            continue
        for _ in range(10):
            name = "".join(rng.choice("ab-\n") for _ in range(rng.randint(0, 12)))
            search = matcher.begin(name)
            while search.result is None:
                search.advance(1)
            assert search.result is (regex.search(name) is not None), (pattern, name)


# -- sliced application ------------------------------------------------------------------------


def vhost_with_attack_queues() -> VirtualHost:
    vhost = VirtualHost("tenant-a")
    for name in attack_names():
        vhost.declare_queue(name)
    return vhost


def test_a_policy_change_runs_in_bounded_slices_and_installs_when_complete():
    vhost = vhost_with_attack_queues()
    policy = policies.Policy("tenant-a", "slow", ATTACK_PATTERN, {"max-length": 1})
    change = vhost.change_policy("slow", policy, operator=False)

    slices = 0
    while not change.run(2_000):
        slices += 1
        if vhost.policies:  # installed: from here on only the writing of results is left
            continue
        assert all(queue.policy is None for queue in vhost.queues.values())
    assert slices > 5
    assert vhost.policies == {"slow": policy}
    assert all(queue.policy is policy for queue in vhost.queues.values())
    assert all(queue.settings.max_length == 1 for queue in vhost.queues.values())
    assert not vhost.policy_changes


def test_entities_declared_or_deleted_while_a_change_computes_are_handled():
    vhost = vhost_with_attack_queues()
    policy = policies.Policy("tenant-a", "slow", ATTACK_PATTERN, {"max-length": 1})
    change = vhost.change_policy("slow", policy, operator=False)
    assert not change.run(500)

    vhost.delete_queue(attack_names()[-1])
    late, _ = vhost.declare_queue("late-b")  # matched against the old table: no policy yet
    replaced, _ = vhost.declare_queue(attack_names()[-1])
    exchange, _ = vhost.declare_exchange("late-exchange-b", "fanout")
    assert late.policy is None
    while not change.run(500):
        pass

    assert late.policy is policy
    assert replaced.policy is policy
    assert exchange.policy_name == "slow"
    assert set(vhost.queues) == {*attack_names(), "late-b"}


def test_a_synchronous_change_finishes_the_changes_queued_before_it():
    vhost = vhost_with_attack_queues()
    first = policies.Policy("tenant-a", "first", "a", {"max-length": 1}, 1)
    second = policies.Policy("tenant-a", "second", "b$", {"max-length": 2}, 2)
    pending = vhost.change_policy("first", first, operator=False)
    assert not pending.run(100)

    vhost.set_policy(second, operator=False)  # an import: runs everything to completion

    assert pending.finished
    assert set(vhost.policies) == {"first", "second"}
    assert all(queue.policy is second for queue in vhost.queues.values())


PATTERNS = ["^a", "a", "b$", "(a|b)*c", "^(ab)+", ".*", "c.c", r"\bb", "(.*)(.*)a"]
APPLY_TO = ["all", "queues", "classic_queues", "quorum_queues", "exchanges"]


def _random_policy(rng: random.Random, vhost: str) -> policies.Policy:
    return policies.Policy(
        vhost,
        rng.choice(["p1", "p2", "p3", "p4"]),
        rng.choice(PATTERNS),
        {"max-length": rng.randint(1, 9)},
        rng.randint(0, 2),
        rng.choice(APPLY_TO),
    )


def _random_name(rng: random.Random) -> str:
    return "".join(rng.choice("abc.") for _ in range(rng.randint(1, 6)))


def _churn(vhost: VirtualHost, rng: random.Random) -> None:
    """A declare or delete between two slices, as AMQP clients do meanwhile."""
    roll, name = rng.random(), _random_name(rng)
    if roll < 0.4:
        vhost.declare_queue(name)
    elif roll < 0.55:
        vhost.declare_queue(
            "q" + name, durable=True, arguments={"x-queue-type": "quorum"}, check_limits=False
        )
    elif roll < 0.7 and vhost.queues:
        vhost.delete_queue(rng.choice(sorted(vhost.queues)))
    elif roll < 0.85:
        vhost.declare_exchange("x" + name, "fanout")
    elif len(vhost.exchanges) > 7:
        vhost.delete_exchange(rng.choice(sorted(set(vhost.exchanges) - {""})))


def _assert_every_entity_has_its_best_match(vhost: VirtualHost) -> None:
    user, operator = vhost.policies.values(), vhost.operator_policies.values()
    for queue in vhost.queues.values():
        kind = policies.queue_kind(queue.quorum)
        assert queue.policy is policies.best_match(user, queue.name, kind), queue.name
        assert queue.operator_policy is policies.best_match(operator, queue.name, kind)
        expected = queue.policy.definition["max-length"] if queue.policy else None
        if queue.operator_policy and expected is not None:
            expected = min(expected, queue.operator_policy.definition["max-length"])
        elif queue.operator_policy:
            expected = queue.operator_policy.definition["max-length"]
        assert queue.settings.max_length == expected
    for exchange in vhost.exchanges.values():
        if exchange.name:
            best = policies.best_match(user, exchange.name, "exchange")
            assert exchange.policy_name == (best.name if best else None), exchange.name


@pytest.mark.parametrize("seed", range(12))
def test_sliced_changes_with_churn_give_every_entity_its_best_match(seed):
    rng = random.Random(seed)
    vhost = VirtualHost("v")
    for _ in range(15):
        _churn(vhost, rng)
    for _ in range(25):
        operator = rng.random() < 0.3
        table = vhost.operator_policies if operator else vhost.policies
        if table and rng.random() < 0.3:
            change = vhost.change_policy(rng.choice(sorted(table)), None, operator=operator)
        else:
            policy = _random_policy(rng, "v")
            change = vhost.change_policy(policy.name, policy, operator=operator)
        while not change.run(rng.choice([1, 50, 400, policychanges.SLICE_UNITS])):
            _churn(vhost, rng)
        _churn(vhost, rng)
        _assert_every_entity_has_its_best_match(vhost)


def test_an_import_defers_matching_to_one_sliced_pass_over_the_entities():
    broker = Broker()
    broker.add_vhost("/")
    broker.vhosts["/"].declare_queue("z-" + "a" * 250 + "b")  # existing: re-matched too
    document = {
        "policies": [
            {"vhost": "/", "name": f"p{index}", "pattern": ATTACK_PATTERN, "priority": index,
             "apply-to": "queues", "definition": {"max-length": index + 1}}
            for index in range(20)
        ],
        "queues": [
            {"vhost": "/", "name": name, "durable": True, "arguments": {}}
            for name in attack_names()
        ],
    }  # fmt: skip

    paused = broker.import_definitions(document, defer_policies=True)

    vhost = broker.vhosts["/"]
    assert paused == [vhost]
    assert len(vhost.policies) == 20
    assert all(queue.policy is None for queue in vhost.queues.values())
    assert all(policy._matcher.cached() == (0, 0, 0) for policy in vhost.policies.values())
    change = vhost.resume_policies()
    slices = 1
    while not change.run(2_000):
        slices += 1
    assert slices > 5
    assert {queue.policy.name for queue in vhost.queues.values()} == {"p19"}
    assert all(queue.settings.max_length == 20 for queue in vhost.queues.values())
    # p19 ranks first and matches: one search per queue, not one per policy
    assert vhost.policies["p0"]._matcher.cached() == (0, 0, 0)


def test_patterns_compiled_ahead_are_used_within_the_block_only():
    compiled = patterns.compile_ahead([ATTACK_PATTERN, "(", ATTACK_PATTERN])
    assert len(compiled) == 2
    with patterns.precompiled(compiled):
        assert patterns.compile_pattern(ATTACK_PATTERN) is compiled[ATTACK_PATTERN]
        with pytest.raises(patterns.InvalidPatternError):
            patterns.compile_pattern("(")
        assert policies.validate({"pattern": "(", "definition": {"max-length": 1}}, operator=False)[
            1
        ]
    assert patterns.compile_pattern(ATTACK_PATTERN) is not compiled[ATTACK_PATTERN]


def test_a_change_that_fails_does_not_block_the_changes_behind_it(monkeypatch):
    vhost = vhost_with_attack_queues()
    failing = vhost.change_policy(
        "bad", policies.Policy("tenant-a", "bad", "a", {}), operator=False
    )
    later = vhost.change_policy("ok", policies.Policy("tenant-a", "ok", "b$", {}), operator=False)

    def broken(*_args, **_kwargs):
        raise RuntimeError("settle failed")

    monkeypatch.setattr(policies, "settle_queue", broken)
    with pytest.raises(RuntimeError):
        failing.run()
    monkeypatch.undo()

    assert later.run()
    assert not vhost.policy_changes
    assert set(vhost.policies) == {"bad", "ok"}
