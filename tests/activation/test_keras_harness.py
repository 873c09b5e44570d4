"""Every tf_ops layer through Keras's own layer test harness,
`keras.src.testing.TestCase.run_layer_test`, with the expectations Keras sets for its own
activation layers (`keras.layers.ELU`, `LeakyReLU`: built after instantiation, masking
supported, no weights): build, symbolic and eager calls, config and serialization round
trip, training, mixed precision. Default and non-default arguments."""

from __future__ import annotations

import pytest
from keras.src import testing

from op_specs import SPECS, layer_class, make_layer, non_default_attrs


def _kwargs(spec, attrs: dict) -> dict:
    layer = make_layer(spec, attrs)
    config = layer.get_config()
    return {arg: config[arg] for arg in layer_class(spec).ENTRY.layer_args} | {
        attr: config[attr] for attr in attrs if attr in config
    }


@pytest.mark.parametrize("non_default", [False, True], ids=["defaults", "non-default"])
@pytest.mark.parametrize("spec", [pytest.param(s, id=s.name) for s in SPECS])
def test_run_layer_test(spec, non_default):
    attrs = non_default_attrs(spec) if non_default else {}
    harness = testing.TestCase(methodName="run_layer_test")
    harness.run_layer_test(
        layer_class(spec),
        init_kwargs=_kwargs(spec, attrs),
        input_shape=(2, 3, 4),
        expected_output_shape=(2, 3, 4),
        expected_num_trainable_weights=0,
        expected_num_non_trainable_weights=0,
        expected_num_seed_generators=0,
        expected_num_losses=0,
        supports_masking=True,
        assert_built_after_instantiation=True,
    )
