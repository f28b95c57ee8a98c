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


def test_not_applicable_and_refused_cells_are_marked_from_the_column():
    column = matrix.Column("promise", (matrix.Source("t.py", "test_x"),), refusal_rows=("tagging",),
                           not_applicable=(("encoder", "no labels"),))
    assert matrix._mark(column, "encoder", ["test_x[encoder]"]) == "n/a"
    assert matrix._detail(column, "encoder", []) == "n/a: no labels"
    assert matrix._mark(column, "tagging", ["test_x[tagging]"]) == "refused"
    assert matrix._mark(column, "tagging", []) == "-"
    assert matrix._mark(column, "span_qa_v1", ["test_x[span_qa_v1]"]) == "yes (1)"


def test_starting_points_table_follows_its_tests():
    path = matrix.STARTS_FILE + "::"
    table = matrix.start_cells([path + "test_fine_tune[released_folder]", path + "test_export[demo_folder]",
                                path + "test_export[demo_folder-extra]", path + "test_unknown[demo_folder]",
                                matrix.EXPORTS + "::test_export[demo_folder]"])
    assert table["released_folder"]["fine-tune"] == ["test_fine_tune[released_folder]"]
    assert table["demo_folder"]["export"] == ["test_export[demo_folder]", "test_export[demo_folder-extra]"]
    assert table["hugging_face_folder"] == {"fine-tune": [], "eval-only": [], "predict": [], "export": []}
    text = "\n".join(matrix.render_starts(table))
    assert "| a demo folder (`demo_output/model`) | - | - | - | yes (2) |" in text
