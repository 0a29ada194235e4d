"""docs/CONFIG.md is the rendering of the parser's key table, so it cannot drift."""


from convnet.config.keydoc import render
from convnet.config.layer_types.table import LAYER_TYPES
from tests.support import ROOT


def test_config_reference_doc_is_up_to_date():
    doc = ROOT / "docs" / "CONFIG.md"
    assert doc.read_text() == render(), "regenerate: python -m convnet.config.keydoc > docs/CONFIG.md"


def test_every_layer_type_and_key_is_documented():
    text = render()
    for name, layer_type in LAYER_TYPES.items():
        assert f"### `{name}`" in text
        for key in layer_type.attrs + layer_type.params + layer_type.hints:
            assert f"`{key.name}`" in text
