"""Robustness: mutated reference configs either load or fail with a ConfigError naming the file,
and generated valid nets round-trip into the expected NetConfig.
"""

from __future__ import annotations

import math
import random
import signal
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convnet.config import NeuronSpec, load_net
from convnet.config.values.location import Where
from convnet.config.values.typed import INT_MAX, SyncMode, local_sgd_period
from convnet.errors import ConfigError
from tests.support.configs import REFERENCE_NAMES, reference_dims, reference_pair, write_pair

MUTANTS_PER_NET = 60
_JUNK_VALUES = ["1", "2", "3", "7", "13", "64", "300", "-1", "0", "-0", "99999999999", "1e309",
                "nan", "inf", "-inf", "", "x", "1.5", "0x10", "[", "]", ",", "dexp[", "tanh[1,",
                "\u00e9", "1" * 500, "1,2,3,4,5", "=", "#", ";"]


@contextmanager
def _deadline(seconds: int):
    """Fail instead of hanging (the parser must never loop on bad input)."""
    def timeout(signum, frame):
        raise TimeoutError(f"load_net took over {seconds}s")
    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# Each mutation takes the file's lines, the other file's section names and a Random;
# it returns new content (lines or raw bytes).

def _delete_line(lines, names, rng):
    del lines[rng.randrange(len(lines))]
    return lines


def _duplicate_line(lines, names, rng):
    i = rng.randrange(len(lines))
    lines.insert(rng.randrange(len(lines) + 1), lines[i])
    return lines


def _swap_lines(lines, names, rng):
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return lines


def _junk_value(lines, names, rng):
    keyed = [i for i, line in enumerate(lines) if "=" in line]
    if keyed:
        i = rng.choice(keyed)
        lines[i] = lines[i].split("=", 1)[0] + "=" + rng.choice(_JUNK_VALUES)
    return lines


def _rename_key(lines, names, rng):
    keyed = [i for i, line in enumerate(lines) if "=" in line]
    if keyed:
        i = rng.choice(keyed)
        key, value = lines[i].split("=", 1)
        key = rng.choice([key.lower(), key.upper(), key[:-1], key + "s", key[::-1]])
        lines[i] = f"{key}={value}"
    return lines


def _unknown_key(lines, names, rng):
    extra = rng.choice(["bogus=1", "filterSizes=3", "epsw=0.1", "neuron=x"])
    lines.insert(rng.randrange(len(lines) + 1), extra)
    return lines


def _rewire_inputs(lines, names, rng):
    """Point an inputs= line at itself, a later layer or nothing: cycles and forward references."""
    wired = [i for i, line in enumerate(lines) if line.startswith("inputs=")]
    if wired and names:
        i = rng.choice(wired)
        lines[i] = "inputs=" + ",".join(rng.sample(names, k=min(len(names), rng.randint(1, 3))))
    return lines


def _drop_section(lines, names, rng):
    headers = [i for i, line in enumerate(lines) if line.startswith("[")] + [len(lines)]
    k = rng.randrange(len(headers) - 1)
    return lines[:headers[k]] + lines[headers[k + 1]:]


def _binary_bytes(lines, names, rng):
    data = "\n".join(lines).encode()
    at = rng.randrange(len(data) + 1)
    return data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))) + data[at:]


def _truncate(lines, names, rng):
    data = "\n".join(lines).encode()
    return data[:rng.randrange(len(data) + 1)]


def _mangle_header(lines, names, rng):
    headers = [i for i, line in enumerate(lines) if line.startswith("[")]
    i = rng.choice(headers)
    lines[i] = rng.choice([lines[i][:-1], lines[i] + "]", "[]", lines[i].upper(),
                           "[" + rng.choice(names) + "]"])
    return lines


MUTATIONS = [_delete_line, _duplicate_line, _swap_lines, _junk_value, _rename_key, _unknown_key,
             _rewire_inputs, _drop_section, _binary_bytes, _truncate, _mangle_header]


def _mutant(rng, layer_def: str, layer_params: str):
    """Apply 1-3 random mutations to one or both files."""
    texts = [layer_def, layer_params]
    names = [line[1:-1] for line in layer_def.splitlines()
             if line.startswith("[") and line.endswith("]")]
    for _ in range(rng.randint(1, 3)):
        which = rng.randrange(2)
        content = texts[which]
        if isinstance(content, bytes):
            continue
        lines = content.splitlines()
        if lines:
            out = rng.choice(MUTATIONS)(lines, names, rng)
            texts[which] = out if isinstance(out, bytes) else "\n".join(out) + "\n"
    return texts


@pytest.mark.parametrize("name", REFERENCE_NAMES)
def test_mutated_reference_configs(tmp_path, name):
    layer_def, layer_params = (p.read_text() for p in reference_pair(name))
    rng = random.Random(f"config-fuzz-{name}")
    outcomes = {"loaded": 0, "rejected": 0}
    for _ in range(MUTANTS_PER_NET):
        mutated = _mutant(rng, layer_def, layer_params)
        paths = write_pair(tmp_path, *mutated)
        try:
            with _deadline(5):
                load_net(*paths, reference_dims(name))
            outcomes["loaded"] += 1
        except ConfigError as err:
            assert str(paths[0]) in str(err) or str(paths[1]) in str(err), str(err)
            outcomes["rejected"] += 1
    assert outcomes["rejected"] > MUTANTS_PER_NET // 3, outcomes


# ---- Generated valid nets round-trip --------------------------------------------------------

def _ceil_div(a, b):
    return math.ceil(a / b)


@st.composite
def small_nets(draw):
    """A random valid chain: data -> image layers -> flat layers -> softmax -> logreg.

    Returns (layer-def text, params text, data dims, num classes, expected
    {name: (inputs, output shape)}).
    """
    channels = draw(st.sampled_from([1, 3, 4]))
    size = draw(st.integers(4, 20))
    classes = draw(st.integers(2, 12))
    sections = [("data", {"type": "data", "dataIdx": "0"}),
                ("labels", {"type": "data", "dataIdx": "1"})]
    params = []
    expected = {"data": ((), (channels, size, size)), "labels": ((), (1,))}
    prev, shape = "data", (channels, size, size)
    for i in range(draw(st.integers(0, 4))):
        name = f"l{i}"
        kind = draw(st.sampled_from(["conv", "local", "pool", "cmrnorm", "neuron"]))
        c, s = shape[0], shape[1]
        keys = {"type": kind, "inputs": prev, "channels": str(c)}
        if kind in ("conv", "local"):
            fs = draw(st.integers(1, s))
            pad = draw(st.integers(0, fs - 1))
            stride = draw(st.integers(1, 3))
            filters = draw(st.integers(1, 8))
            twice = draw(st.booleans())
            keys.update(filters=str(filters), filterSize=str(fs), padding=str(pad),
                        stride=str(stride))
            if twice:  # the same input read twice: single values expand to both
                keys["inputs"] = f"{prev},{prev}"
            m = 1 + _ceil_div(2 * pad + s - fs, stride)
            shape = (filters, m, m)
            params.append((name, {"epsW": "0.01", "epsB": "linear[0.1;10]", "momW": "0.9",
                                  "momB": "0.9"}))
        elif kind == "pool":
            sx = draw(st.integers(1, s))
            stride = draw(st.integers(1, sx))
            keys.update(pool=draw(st.sampled_from(["max", "avg", "maxabs"])), sizeX=str(sx),
                        stride=str(stride))
            o = 1 + _ceil_div(s - sx, stride)
            shape = (c, o, o)
        elif kind == "cmrnorm":
            keys["size"] = str(draw(st.integers(1, c)))
            params.append((name, {"scale": "0.001", "pow": "0.75"}))
        else:
            del keys["channels"]
            keys["neuron"] = draw(st.sampled_from(["relu", "tanh[1.7,0.66]", "abstanh[1,2]",
                                                   "ident"]))
        sections.append((name, keys))
        expected[name] = (tuple(keys["inputs"].split(",")), shape)
        prev = name
    sections.append(("fc", {"type": "fc", "inputs": prev, "outputs": str(classes)}))
    params.append(("fc", {"epsW": "exp[base=0.01;tgtFactor=100]", "epsB": "0.02", "momW": "0.9",
                          "momB": "0"}))
    sections.append(("probs", {"type": "softmax", "inputs": "fc"}))
    sections.append(("cost", {"type": "cost.logreg", "inputs": "labels,probs"}))
    expected.update(fc=((prev,), (classes,)), probs=(("fc",), (classes,)),
                    cost=(("labels", "probs"), (1,)))
    style = draw(st.sampled_from(["plain", "spaced", "commented"]))
    return (_render(sections, style, draw), _render(params, style, draw),
            {0: (channels, size, size), 1: (1,)}, classes, expected)


def _render(sections, style, draw) -> str:
    """INI text in one of a few equivalent spellings, keys in a random order."""
    out = ["# generated net"] if style == "commented" else []
    for name, keys in sections:
        out.append(f"[{name}]" + ("  ; layer" if style == "commented" else ""))
        for key in draw(st.permutations(list(keys))):
            value = keys[key]
            if style == "spaced":
                out.append(f"  {key} = {value}  ")
            elif style == "commented":
                out.append(f"{key}={value} # {key}")
            else:
                out.append(f"{key}={value}")
        out.append("")
    return "\n".join(out)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(small_nets())
def test_generated_nets_round_trip(tmp_path, generated):
    layer_def, layer_params, dims, classes, expected = generated
    net = load_net(*write_pair(tmp_path, layer_def, layer_params), dims)
    assert list(net.layers) == list(expected)
    assert net.num_classes == classes
    for name, (inputs, shape) in expected.items():
        layer = net[name]
        assert layer.inputs == inputs and layer.output_shape == shape, name
        assert layer.input_shapes == tuple(net[i].output_shape for i in inputs)
        if layer.type in ("conv", "local"):
            assert len(layer.attrs["filterSize"]) == len(inputs) == len(layer.params["epsW"])
            assert layer.attrs["modulesX"] == shape[1]
        if layer.type == "neuron":
            assert isinstance(layer.neuron, NeuronSpec)


_SYNC_WHERE = Where("params.cfg", "fc", "sync", 3)


def _spelled_sync():
    """Valid spellings of a layer's sync= value, with the mode they mean."""
    local = st.builds(lambda word, k, zeros: (f"{word}:{'0' * zeros}{k}", f"local:{k}"),
                      st.sampled_from(["local", "LOCAL", "Local"]),
                      st.integers(1, INT_MAX), st.integers(0, 2))
    sync = st.sampled_from([("sync", "sync"), ("SYNC", "sync"), (" Sync ", "sync")])
    return st.one_of(local, sync)


@settings(max_examples=200, deadline=None)
@given(st.one_of(_spelled_sync(), st.text(max_size=14).map(lambda t: (t, None)),
                 st.integers(-3, 3).map(lambda k: (f"local:{k}", None)),
                 st.sampled_from(["async", "async:0", "ASYNC:4"]).map(lambda t: (t, None))))
def test_a_layer_sync_value_is_its_mode_or_an_error_naming_the_line(case):
    """Any text is either a mode, spelled as --sync spells it (converting it again gives
    it back), or a ConfigError naming the file, section, key and line; async never
    passes."""
    text, meant = case
    convert = SyncMode()
    try:
        got = convert(text, _SYNC_WHERE)
    except ConfigError as error:
        assert meant is None, text
        assert (error.file, error.section, error.key) == ("params.cfg", "fc", "sync")
        assert str(error).count("line 3:") == 1
        return
    assert meant is None or got == meant, text
    assert got == "sync" or local_sgd_period(got) >= 1
    assert not text.strip().lower().startswith("async")
    assert convert(got, _SYNC_WHERE) == got
