"""tests/contracts/README.md is the generated table of the contract matrix, and the table can fail."""

from tests.contracts import matrix


def test_readme_is_the_generated_table():
    with open(matrix.README, encoding="utf-8") as f:
        readme = f.read()
    assert readme == matrix.generate(), "tests/contracts/README.md is stale: python -m tests.contracts.matrix --write"


def test_cells_follow_the_collected_tests():
    """A removed or renamed test empties its cell (the table cannot keep naming it)."""
    ov = matrix.OPENVINO + "::"
    nodes = ["tests/contracts/test_exports.py::test_library[encoder]",
             "tests/contracts/test_resume.py::test_rerun_with_another_setting_is_refused_naming_it[tagging-spm_model]",
             "tests/contracts/test_exports.py::test_openvino_refusal[tagging]",
             matrix.PRETRAIN + "::test_albert_pretrain_rerun_of_a_finished_run_changes_nothing",
             ov + "test_text_model_equals_saved_model_on_edge_texts", ov + "test_layout",
             ov + "test_text_model_of_a_classifier_equals_saved_model",
             ov + "test_classifier_variant_equals_saved_model[classifier_regression]"]
    table = matrix.cells(nodes)
    assert table["encoder"]["SavedModel = library"] == ["test_library[encoder]"]
    assert table["tagging"]["SavedModel = library"] == []
    assert table["tagging"]["rerun refusals"] == ["test_rerun_with_another_setting_is_refused_naming_it[tagging-spm_model]"]
    assert table["tagging"]["OpenVINO = SavedModel"] == ["test_openvino_refusal[tagging]"]
    assert table["pretrainer"]["OpenVINO = SavedModel"] == []
    for row in ("encoder", "pretrainer"):  # albert-pretrain's tests fill both rows
        assert table[row]["--do_train rerun"] == ["test_albert_pretrain_rerun_of_a_finished_run_changes_nothing"]
        assert table[row]["kill -9, resume"] == []
    assert table["encoder"]["OpenVINO = SavedModel"] == ["test_text_model_equals_saved_model_on_edge_texts"]
    assert table["classifier_single"]["OpenVINO = SavedModel"] == ["test_text_model_of_a_classifier_equals_saved_model"]
    assert table["classifier_regression"]["OpenVINO = SavedModel"] == [
        "test_classifier_variant_equals_saved_model[classifier_regression]"]
    assert table["classifier_pair"]["OpenVINO = SavedModel"] == []  # not tested there: the table says so
    text = matrix.render(table)
    assert "| SavedModel = library | - |" in text
    assert "| tagging | - | - | yes (1) | - | - | refused | - | - | - |" in text


def test_source_nodes_expand_the_row_parametrization(tmp_path, monkeypatch):
    """The OpenVINO file's tests are read from its source: one node per literal `row` value."""
    (tmp_path / "t.py").write_text(
        "import pytest\nROWS_HERE = ('a', 'b')\n\n@pytest.mark.parametrize('row', ROWS_HERE)\n"
        "def test_x(row):\n    pass\n\n@pytest.mark.parametrize('precision', ['f32'])\n"
        "def test_y(precision):\n    pass\n\ndef helper():\n    pass\n")
    monkeypatch.setattr(matrix, "REPO", str(tmp_path))
    assert matrix.source_nodes("t.py") == ["t.py::test_x[a]", "t.py::test_x[b]", "t.py::test_y"]
