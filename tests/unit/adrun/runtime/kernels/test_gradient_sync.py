"""gradient_sync's one use of private TensorFlow API: dropping some control inputs of an op already
built (`Operation._remove_all_control_inputs`, `_add_control_inputs`), checked on the pinned TF."""

from __future__ import annotations

import tensorflow as tf

from adrun.runtime.kernels.gradient_sync import _without_control_inputs


def test_only_the_cut_control_inputs_are_dropped():
    with tf.Graph().as_default():
        kept, cut, other = (tf.no_op(name=n) for n in ("kept", "cut", "other"))
        with tf.control_dependencies([kept, cut]):
            finish = tf.no_op(name="finish")
        with tf.control_dependencies([other]):
            untouched = tf.no_op(name="untouched")
        _without_control_inputs([finish, untouched], [cut])
        assert [c.name for c in finish.control_inputs] == ["kept"]
        assert [c.name for c in untouched.control_inputs] == ["other"]
