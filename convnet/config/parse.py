"""Layer-def + layer-params files -> a typed :class:`NetConfig`, without shapes.

Checks each section on its own against its type's descriptor in
:data:`LAYER_TYPES` (keys, types, values, per-input lists) and that ``inputs``
name earlier layers, so the file order is a topological order.  Everything
that relates a layer to the shapes of its inputs is :mod:`convnet.config.shapes`'
job.
"""

from __future__ import annotations

from convnet.config.ini import Entry, IniFile, Section, read_ini
from convnet.config.layer_types.table import LAYER_TYPES, REQUIRED, TYPE_ALIASES, Key, LayerType
from convnet.config.values.location import Where, quote, warn
from convnet.config.model import LayerDef, NetConfig
from convnet.config.values.neurons import NeuronValue
from convnet.config.values.suggest import nearest
from convnet.config.values.typed import Int, split_list

_COMMON_KEYS = ("type", "inputs", "gpu", "neuron")
_NAME_FORBIDDEN = set(",[]=:#;")
_GPU = Int(lo=0)
_NEURON = NeuronValue()


def parse_net(layer_def_path, layer_params_path) -> NetConfig:
    """Parse both files; shapes are left empty (see :func:`infer_shapes`)."""
    defs = read_ini(layer_def_path)
    params = read_ini(layer_params_path)
    if not defs.sections:
        raise Where(defs.path).error("defines no layers (no [section] found)")
    for name in _unread_sections(defs, params):
        # cuda-convnet2 looked up the params of the layers it defined and never
        # saw other sections: a file shared by several nets still loads.
        section = params.sections[name]
        warn(Where(params.path, name, None, section.line),
             f"no layer of this name in {defs.path}; its keys are not read, as in cuda-convnet2",
             suggestion=nearest(name, defs.sections))
    layers: dict[str, LayerDef] = {}
    for section in defs.sections.values():
        layers[section.name] = _LayerParser(section, defs, params, layers).parse()
    return NetConfig(layers=layers, data_dims={}, num_classes=0,
                     layer_def_file=defs.path, layer_params_file=params.path)


def _unread_sections(defs: IniFile, params: IniFile) -> list[str]:
    """The layer-params sections that name no layer of the layer-def file."""
    return [name for name in params.sections if name not in defs.sections]


def _canonical_names(ltype: LayerType) -> dict[str, str]:
    """Lower-cased key -> the key's canonical name, for every key a layer of this
    type accepts (v1 aliases map to the key they stand for): the original read
    both files with ConfigParser, which lower-cased key names."""
    names = {k.name: k.name for k in ltype.attrs + ltype.params + ltype.hints}
    names.update({name: name for name in _COMMON_KEYS})
    names.update(ltype.aliases)
    return {spelling.lower(): name for spelling, name in names.items()}


class _LayerParser:
    """Parses one layer: its layer-def section plus its layer-params section, if any."""

    def __init__(self, section: Section, defs: IniFile, params: IniFile,
                 earlier: dict[str, LayerDef]):
        self.section, self.defs, self.params, self.earlier = section, defs, params, earlier
        self.param_section = params.sections.get(section.name)
        self.here = Where(defs.path, section.name, None, section.line)
        self.param_here = Where(params.path, section.name, None,
                                self.param_section.line if self.param_section else None)

    def parse(self) -> LayerDef:
        self._check_name()
        ltype = self._layer_type()
        entries = self._def_entries(ltype)
        inputs = self._inputs(ltype, entries.get("inputs"))
        gpu = self._gpu(ltype, entries.get("gpu"))
        neuron = self._neuron(ltype, entries.get("neuron"))
        param_entries = self._param_entries(ltype)
        attrs = {key.name: self._value(key, entries, param_entries if key.also_in_params else {},
                                       len(inputs))
                 for key in ltype.attrs}
        for key in ltype.hints:
            self._value(key, entries, {}, len(inputs))
        if ltype.finish:
            ltype.finish(attrs, lambda name: self._where(name, entries))
        params = self._params(ltype, entries, param_entries, len(inputs))
        return LayerDef(
            name=self.section.name, type=ltype.name, inputs=tuple(inputs),
            gpu=gpu, neuron=neuron, attrs=attrs, params=params,
            file=self.defs.path, params_file=self.params.path)

    def _check_name(self) -> None:
        name = self.section.name
        if not name.isprintable() or any(c.isspace() or c in _NAME_FORBIDDEN for c in name):
            raise self.here.error(f"layer name {quote(name)} may not contain spaces or any of "
                                  f"{''.join(sorted(_NAME_FORBIDDEN))}")

    def _layer_type(self) -> LayerType:
        entry = self.section.entries.get("type")  # entries are keyed in lower case
        if entry is None:
            raise self.here.at("type").error(
                f"missing; every layer needs a type ({', '.join(LAYER_TYPES)})")
        name = TYPE_ALIASES.get(entry.value, entry.value)
        if name not in LAYER_TYPES:
            raise self.here.at("type", entry.line).error(
                f"unknown layer type {quote(entry.value)}",
                suggestion=nearest(entry.value, LAYER_TYPES))
        return LAYER_TYPES[name]

    def _def_entries(self, ltype: LayerType) -> dict[str, Entry]:
        """The section's entries by canonical key (any case, v1 aliases resolved),
        unknown keys rejected."""
        names = _canonical_names(ltype)
        known = set(_COMMON_KEYS) | {k.name for k in ltype.attrs + ltype.params + ltype.hints}
        entries: dict[str, Entry] = {}
        for folded, entry in self.section.entries.items():
            key = names.get(folded)
            where = self.here.at(entry.key, entry.line)
            if key is None:
                raise where.error(f"not a key of {ltype.name} layers",
                                  suggestion=nearest(entry.key, known | set(ltype.aliases)))
            if key in entries:
                raise where.error(f"{entry.key} and {entries[key].key} are the same key; give one")
            entries[key] = entry
        return entries

    def _param_entries(self, ltype: LayerType) -> dict[str, Entry]:
        """The layer-params section's entries by canonical key (any case)."""
        if self.param_section is None:
            return {}
        allowed = {k.name for k in ltype.params} | {k.name for k in ltype.attrs if k.also_in_params}
        names = _canonical_names(ltype)
        entries: dict[str, Entry] = {}
        for folded, entry in self.param_section.entries.items():
            key = names.get(folded)
            if key not in allowed:
                where = self.param_here.at(entry.key, entry.line)
                if not allowed:
                    raise where.error(f"{ltype.name} layers take no layer-params keys")
                if key is not None:
                    raise where.error(f"{entry.key} belongs in the layer-def file {self.defs.path}")
                raise where.error(f"not a layer-params key of {ltype.name} layers",
                                  suggestion=nearest(entry.key, allowed))
            entries[key] = entry
        return entries

    def _inputs(self, ltype: LayerType, entry: Entry | None) -> list[str]:
        if ltype.max_inputs == 0:
            if entry is not None:
                raise self.here.at("inputs", entry.line).error(
                    f"{ltype.name} layers read no inputs")
            return []
        if entry is None:
            raise self.here.at("inputs").error(f"missing; {ltype.name} layers read other layers")
        where = self.here.at("inputs", entry.line)
        names = split_list(entry.value, where)
        for name in names:
            self._check_input(name, where)
        count = len(names)
        if count < ltype.min_inputs or (ltype.max_inputs is not None and count > ltype.max_inputs):
            wanted = (str(ltype.min_inputs) if ltype.min_inputs == ltype.max_inputs
                      else f"at least {ltype.min_inputs}" if ltype.max_inputs is None
                      else f"{ltype.min_inputs} to {ltype.max_inputs}")
            raise where.error(f"{ltype.name} layers read {wanted} input(s), got {count}")
        return names

    def _check_input(self, name: str, where: Where) -> None:
        me = self.section.name
        if name == me:
            raise where.error(f"layer '{me}' reads itself (a cycle)")
        if name in self.defs.sections and name not in self.earlier:
            raise where.error(f"layer '{me}' reads '{name}', which is defined after it; "
                              "inputs must name earlier layers (a forward reference or a cycle)")
        if name not in self.earlier:
            raise where.error(f"no layer named {quote(name)} before '{me}'",
                              suggestion=nearest(name, self.earlier))
        if self.earlier[name].is_cost:
            raise where.error(
                f"'{name}' is a cost layer; its output cannot be read by other layers")

    def _gpu(self, ltype: LayerType, entry: Entry | None) -> tuple[int, ...] | None:
        if entry is None:
            return None
        where = self.here.at("gpu", entry.line)
        if not ltype.takes_gpu:
            raise where.error(
                f"{ltype.name} layers take no gpu; they run where the layers reading them run")
        return tuple(_GPU(item, where) for item in split_list(entry.value, where))

    def _neuron(self, ltype: LayerType, entry: Entry | None):
        if entry is None:
            if ltype.neuron == "required":
                raise self.here.at("neuron").error(
                    "missing; a neuron layer needs neuron=<function>")
            return None
        where = self.here.at("neuron", entry.line)
        if ltype.neuron == "forbidden":
            raise where.error(f"{ltype.name} layers take no neuron")
        return _NEURON(entry.value, where)

    def _params(self, ltype: LayerType, entries: dict[str, Entry], param_entries: dict[str, Entry],
                count: int) -> dict:
        given = entries.keys() | param_entries.keys()
        missing = [k.name for k in ltype.params if k.default is REQUIRED and k.name not in given]
        if missing:
            where = self.param_here.at(missing[0])
            if self.param_section is None:
                raise where.error(f"no [{self.section.name}] section in the layer-params file; "
                                  f"{ltype.name} layers need {', '.join(missing)}",
                                  suggestion=nearest(self.section.name,
                                                     _unread_sections(self.defs, self.params)))
            raise where.error(f"missing {', '.join(missing)} (needed by {ltype.name} layers)")
        return {key.name: self._value(key, entries, param_entries, count) for key in ltype.params}

    def _value(self, key: Key, entries: dict[str, Entry], param_entries: dict[str, Entry],
               count: int):
        """Convert ``key`` from the params entries, else the def entries, else its default."""
        if key.name in param_entries:
            entry, here = param_entries[key.name], self.param_here
        elif key.name in entries:
            entry, here = entries[key.name], self.here
        elif key.default is REQUIRED:
            raise self.here.at(key.name).error(f"missing (expected {key.convert.expected})")
        else:
            return [key.default] * count if key.per_input else key.default
        where = here.at(entry.key, entry.line)
        if not key.per_input:
            return key.convert(entry.value, where)
        items = split_list(entry.value, where)
        if len(items) not in (1, count):
            wanted = "1 value" if count == 1 else f"1 value or {count} (one per input)"
            raise where.error(f"expected {wanted}, got {len(items)}")
        values = [key.convert(item, where) for item in items]
        return values * count if len(values) == 1 else values

    def _where(self, key: str, entries: dict[str, Entry]) -> Where:
        entry = entries.get(key)
        return self.here.at(entry.key if entry else key, entry.line if entry else None)
