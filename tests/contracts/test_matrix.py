"""tests/contracts/README.md is the generated table of the contract matrix, and the table can fail."""

from tests.contracts import matrix


def test_readme_is_the_generated_table():
    with open(matrix.README, encoding="utf-8") as f:
        readme = f.read()
    assert readme == matrix.generate(), "tests/contracts/README.md is stale: python -m tests.contracts.matrix --write"


def test_cells_follow_the_collected_tests():
    """A removed or renamed test empties its cell (the table cannot keep naming it)."""
    nodes = ["tests/contracts/test_exports.py::test_library[encoder]",
             "tests/contracts/test_resume.py::test_rerun_with_another_setting_is_refused_naming_it[tagging-spm_model]",
             "tests/contracts/test_exports.py::test_openvino_refusal[tagging]"]
    table = matrix.cells(nodes, ["test_text_model_equals_saved_model", "test_layout",
                                 "test_text_model_of_a_classifier_equals_saved_model"])
    assert table["encoder"]["SavedModel = library"] == ["test_library[encoder]"]
    assert table["tagging"]["SavedModel = library"] == []
    assert table["tagging"]["rerun refusals"] == ["test_rerun_with_another_setting_is_refused_naming_it[tagging-spm_model]"]
    assert table["tagging"]["OpenVINO = SavedModel"] == ["test_openvino_refusal[tagging]"]
    assert table["pretrainer"]["OpenVINO = SavedModel"] == []
    assert table["encoder"]["OpenVINO = SavedModel"] == ["test_text_model_equals_saved_model"]
    assert table["classifier_single"]["OpenVINO = SavedModel"] == ["test_text_model_of_a_classifier_equals_saved_model"]
    assert table["classifier_pair"]["OpenVINO = SavedModel"] == []  # not tested there: the table says so
    text = matrix.render(table)
    assert "| SavedModel = library | - |" in text
    assert "| tagging | - | - | yes (1) | - | - | refused | - | - | - |" in text
