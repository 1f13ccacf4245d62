"""The results reader (:func:`bayesslr.results.load.read_netcdf_tree`): the same tree as
``xr.open_datatree(path, engine="h5netcdf").load()``, group for group, variable for variable,
with every attribute and encoding, on a sweep's layout and on a file using the netCDF features
a results file may hold; and its cheaper h5netcdf classes are the ones h5netcdf uses."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from test_report import synthetic

from bayesslr.results.load import _read_only_classes, load_results, read_netcdf_tree


def _features() -> xr.DataTree:
    """Nested and empty groups, a dimension of the root used below it, strings of both kinds,
    integers with a fill value, NaN, booleans, times, a scalar, a compressed chunked array."""
    x = np.array([0.5, 1.0, 2.0])
    root = xr.Dataset({"w": ("x", [1.0, np.nan, 3.0])}, coords={"x": x},
                      attrs={"bayesslr_version": "0", "config": '{"a": 1}', "seed": 7,
                             "scale": 0.25, "sizes": np.array([1, 2, 3])})
    a = xr.Dataset(
        {"err": (("x", "s"), np.arange(6.0).reshape(3, 2) / 7,
                 {"units": "1", "long_name": "test error"}),
         "count": (("x",), np.array([1, -1, 3], dtype=np.int32)),
         "ok": (("x",), np.array([True, False, True])),
         "label": (("s",), np.array(["alpha", "bé"])),
         "note": (("s",), np.array(["x", "a longer one"], dtype=object)),
         "when": (("s",), np.array(["2024-01-01T00", "2024-06-30T12"], dtype="datetime64[ns]")),
         "total": ((), 4.5)},
        coords={"s": ["p", "q"]}, attrs={"family": "a"})
    b = xr.Dataset({"big": (("s", "t"), np.linspace(0, 1, 2 * 50).reshape(2, 50))},
                   coords={"t": np.arange(50)})
    return xr.DataTree.from_dict({"/": root, "/a": a, "/a/b": b,
                                  "/c": xr.Dataset(attrs={"empty": "yes"})})


@pytest.fixture(scope="module", params=["sweep", "features"])
def nc(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("load") / "dataset.nc"
    if request.param == "sweep":
        synthetic(("gd",)).to_netcdf(path, engine="h5netcdf")
    else:
        _features().to_netcdf(path, engine="h5netcdf", encoding={
            "/a": {"count": {"_FillValue": -1}},
            "/a/b": {"big": {"zlib": True, "complevel": 4, "chunksizes": (1, 25)}}})
    return path


def test_the_reader_returns_what_open_datatree_loads(nc):
    with xr.open_datatree(nc, engine="h5netcdf") as plain:
        plain = plain.load()
    tree = read_netcdf_tree(nc)
    xr.testing.assert_identical(tree, plain)
    assert list(tree.groups) == list(plain.groups)
    for path in plain.groups:
        got, want = tree[path], plain[path]
        assert list(got.attrs) == list(want.attrs), path
        assert got.encoding == want.encoding, path
        got, want = got.to_dataset(inherit=False), want.to_dataset(inherit=False)
        assert list(got.variables) == list(want.variables), path
        for name, var in want.variables.items():
            assert got[name].dtype == var.dtype, (path, name)
            assert repr(got[name].encoding) == repr(var.encoding), (path, name)


def test_load_results_reads_through_the_reader(tmp_path):
    nc = tmp_path / "dataset.nc"
    _features().to_netcdf(nc, engine="h5netcdf")
    with xr.open_datatree(nc, engine="h5netcdf") as plain:
        xr.testing.assert_identical(load_results(tmp_path), plain.load())
    assert load_results(tmp_path).encoding["source"] == str(nc.resolve())


def test_h5netcdf_takes_the_readers_classes(nc):
    """h5netcdf builds its groups and variables from the ``File``'s ``_group_cls`` and
    ``_variable_cls``, and has the members the reader's classes replace: were that to change,
    the reader would stay right but lose its saving."""
    import h5netcdf

    File, Group = _read_only_classes()
    for cls, base in ((File._variable_cls, h5netcdf.Variable), (Group, h5netcdf.Group)):
        replaced = set(vars(cls)) - {"__module__", "__doc__", "__qualname__",
                                     "_dimension_size", "_scale_names"}
        assert replaced and all(hasattr(base, m) for m in replaced), replaced - set(dir(base))
    with File(str(nc), "r") as f:
        group = next(iter(f.groups.values()))
        assert type(group) is Group
        assert all(type(v) is File._variable_cls for v in group.variables.values())
        v = next(iter(group.variables.values()))
        assert v.shape == v._h5ds.shape


def test_an_h5netcdf_whose_internals_moved_is_read_the_plain_way(nc, monkeypatch):
    """The reader leans on h5netcdf internals; where a release moved them (an
    AttributeError inside the cheaper classes), the file is read by the plain engine, not
    refused."""
    from bayesslr.results import load as L

    def moved(_path):
        raise AttributeError("'Variable' object has no attribute '_h5ds'")

    monkeypatch.setattr(L, "_read_once", moved)
    with xr.open_datatree(nc, engine="h5netcdf") as plain:
        xr.testing.assert_identical(read_netcdf_tree(nc), plain.load())
