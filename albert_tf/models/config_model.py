"""The base of the models built from an AlbertConfig."""

import keras

from albert_tf.config import AlbertConfig


class ConfigModel(keras.Model):
    """A keras.Model whose whole configuration is an `AlbertConfig`.

    Subclasses create their layers in `__init__` and call themselves once on a
    dummy batch so that every weight exists after construction; `get_config`
    and `from_config` round-trip through the config's dict.

    Example:
    >>> from albert_tf import AlbertConfig, AlbertEncoder
    >>> encoder = AlbertEncoder(AlbertConfig.tiny())
    >>> AlbertEncoder.from_config(encoder.get_config()).config == encoder.config
    True
    """

    def build(self, input_shape=None):
        # Sublayers build on the first call (made by __init__ on a dummy batch).
        pass

    def get_config(self):
        return {"name": self.name, "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(AlbertConfig(**config.pop("config")), **config)
