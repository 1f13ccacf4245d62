"""Load the results of a sweep: a directory written by ``bayesslr run``, or its ``dataset.nc``.

:func:`read_netcdf_tree` is the one reader of whole results files (this module's results and
the shipped reference): what ``xr.open_datatree(path, engine="h5netcdf").load()`` returns,
every group, variable, attribute and encoding, for less work. The h5netcdf engine looks up the
same HDF5 objects again on every access (each variable's dataset, and each dimension's scale
every time a shape is asked for), and names the scales of a variable by asking HDF5 for their
path, which HDF5 finds by searching the file; in a file opened read-only, for one load,
nothing of that can change, so the reader's h5netcdf classes look each object up once and
name a scale by its identity among the dimensions its group sees.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import xarray as xr

from bayesslr.core.task import ConfigError


def load_results(path: str | Path) -> xr.DataTree:
    """The results of a sweep (a directory written by ``bayesslr run``, or its ``.nc`` file),
    loaded in memory: the root holds the provenance and the table of cells, one child group per
    method family (:mod:`bayesslr.sweep.dataset`)."""
    p = Path(path)
    f = p / "dataset.nc" if p.is_dir() else p
    if not f.exists():
        raise ConfigError(f"results={str(path)!r} holds no dataset.nc; allowed: a directory "
                          "written by 'bayesslr run'")
    try:
        tree = read_netcdf_tree(f)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"results={str(f)!r} cannot be read ({exc})") from None
    if not is_results(tree):
        raise ConfigError(f"results={str(f)!r} is a netCDF file but not bayesslr results (no "
                          "'bayesslr_version' attribute, no 'cells' or method family group); "
                          "allowed: a directory written by 'bayesslr run', or its dataset.nc")
    return tree


def read_netcdf_tree(path: str | Path) -> xr.DataTree:
    """The netCDF-4 file ``path``, every group loaded in memory: the same tree, group for
    group (variables, attributes, encodings, ``source`` included) as
    ``xr.open_datatree(path, engine="h5netcdf").load()``.

    Raises what that raises on a file that is not netCDF-4 (:class:`OSError`,
    :class:`ValueError`).
    """
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))  # xarray's ``source``
    try:
        return _read_once(path)
    except (AttributeError, TypeError):
        # the reader's classes lean on h5netcdf internals (tested: 1.8); another release
        # that moved them is read the plain way, slower but the same tree
        with xr.open_datatree(path, engine="h5netcdf") as tree:
            return tree.load()


def _read_once(path: str) -> xr.DataTree:
    File, _ = _read_only_classes()
    datasets: dict[str, xr.Dataset] = {}
    with File(path, "r", phony_dims="access", decode_vlen_strings=True) as root:
        stack: list[tuple[str, Any]] = [("/", root)]
        while stack:  # depth first, children in file order: open_datatree's order
            name, group = stack.pop()
            ds = xr.open_dataset(xr.backends.H5NetCDFStore(group)).load()
            ds.set_close(None)  # the file is closed with the ``with`` block
            datasets[name] = ds
            stack += reversed([(f"{name.rstrip('/')}/{k}", g) for k, g in group.groups.items()])
    datasets["/"].encoding["source"] = path
    return xr.DataTree.from_dict(datasets)


@functools.cache
def _read_only_classes() -> tuple[type, type]:
    """h5netcdf's ``File`` and ``Group`` whose variables look up their HDF5 dataset, and each
    group its dimension sizes and scales, once (built on first use, so that importing this
    module does not import h5netcdf)."""
    import h5netcdf

    class Variable(h5netcdf.Variable):
        @property
        def _h5ds(self):
            try:
                return self.__dict__["_h5ds_once"]
            except KeyError:
                ds = self.__dict__["_h5ds_once"] = super()._h5ds
                return ds

        @property
        def shape(self):
            try:
                return self.__dict__["_shape_once"]
            except KeyError:
                shape = self.__dict__["_shape_once"] = tuple(
                    self._parent._dimension_size(d) for d in self.dimensions)
                return shape

        def _lookup_dimensions(self):
            # a scale reached by reference is named by identity among the scales the group
            # sees: asking HDF5 its name makes it search the file for a path to it
            attrs = self._h5ds.attrs
            scale = attrs.get("CLASS") == b"DIMENSION_SCALE"
            refs = None if scale else attrs.get("DIMENSION_LIST")
            if refs is not None and all(len(r) for r in refs):
                scales = self._parent._scale_names()
                try:
                    return tuple(scales[self._root._h5file[r[-1]]] for r in refs)
                except KeyError:
                    pass
            return super()._lookup_dimensions()

    class Group(h5netcdf.Group):
        _variable_cls = Variable

        @property
        def _group_cls(self):
            return Group

        def _dimension_size(self, name: str) -> int:
            sizes = self.__dict__.setdefault("_sizes_once", {})
            if name not in sizes:
                sizes[name] = self._all_dimensions[name].size
            return sizes[name]

        def _scale_names(self) -> dict:
            if "_scales_once" not in self.__dict__:
                self.__dict__["_scales_once"] = {
                    dim._h5ds: name for dims in self._all_dimensions.maps
                    for name, dim in dims.items() if not dim._phony}
            return self.__dict__["_scales_once"]

    class File(h5netcdf.File):
        _variable_cls = Variable
        _group_cls = Group._group_cls
        _dimension_size = Group._dimension_size
        _scale_names = Group._scale_names

    return File, Group


def is_results(tree: xr.DataTree) -> bool:
    """Whether ``tree`` looks like bayesslr results: the provenance attribute of
    ``bayesslr run``, or a ``cells`` or method family group (results assembled by hand)."""
    from bayesslr.registry import FAMILY_MODULES

    groups = set(tree.children)
    return ("bayesslr_version" in tree.attrs
            or bool(groups & {"cells", "inference", *FAMILY_MODULES}))
