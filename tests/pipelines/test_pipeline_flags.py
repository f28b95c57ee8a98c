"""The data binary's flags fill PretrainingDataConfig once (flags/pipeline_flags.py)."""

import dataclasses

from absl import flags

import pipelines
from flags import pipeline_flags


def parsed(*args):
    values = flags.FlagValues()
    pipeline_flags.define_create_pretraining_data_flags(values)
    values(["prog", "--input_file=a.txt", "--spm_model_file=sp.model", "--output_dir=out",
            *args])
    return values


def test_flags_fill_the_config():
    values = parsed("--max_seq_length=128", "--nodo_lower_case", "--num_shards=7",
                    "--output_compression=GZIP", "--masked_lm_prob=0.2", "--overwrite")
    config = pipeline_flags.pretraining_data_config(values)
    assert isinstance(config, pipelines.PretrainingDataConfig)
    assert (config.max_seq_length, config.do_lower_case, config.num_shards,
            config.output_compression, config.masked_lm_prob) == (128, False, 7, "GZIP", 0.2)
    assert values.overwrite is True
    # Defaults: the flags' defaults are the config's (one source of truth each way).
    default = pipeline_flags.pretraining_data_config(parsed())
    assert default == pipelines.PretrainingDataConfig(num_parallel_calls=None)


def test_every_config_field_has_a_flag_except_library_only_ones():
    fields = {f.name for f in dataclasses.fields(pipelines.PretrainingDataConfig)}
    assert set(pipeline_flags.PRETRAINING_DATA_CONFIG_FLAGS) == fields - {
        "file_prefix", "num_parallel_calls"}
    values = parsed()
    for name in pipeline_flags.PRETRAINING_DATA_CONFIG_FLAGS:
        assert name in values, name
