"""Path classes have one home (issue 11 review, item 2): how a flow is classified, its
reporting refinement and the demo's class list all come from railab.topologies.pathclasses, so
a class registered in one module (tests/dummy_registrations.py: ``dummy-cross-pod``) is classified,
routed with its hops and run by the demo."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

from railab.demo import traffic_flows
from railab.topologies import pathclasses
from railab.topologies.generator import build_lab
from railab.topologies.intent import load_intent
from railab.topologies.pathclasses import FlowPath, PathClassError, PathEnd, path_classes
from railab.traffic.patterns import Flow, classify, fabric_of, flows_for, report_class, route

TESTS = Path(__file__).resolve().parent
PID = os.getpid()
SHIPPED_RUN = ["intra-server", "intra-rail", "inter-rail", "inter-rail-pxn", "cross-group"]


@pytest.fixture
def dummy():
    sys.modules.pop("dummy_registrations", None)
    sys.path.insert(0, str(TESTS))
    try:
        mod = importlib.import_module("dummy_registrations")
    finally:
        sys.path.remove(str(TESTS))
    yield mod
    mod.unregister()
    sys.modules.pop("dummy_registrations", None)


def _mini():
    return build_lab(load_intent("mini"), name=f"pc{PID}").spec


def test_shipped_classification_unchanged():
    spec = _mini()
    assert classify(spec, ("srv1", 0), ("srv1", 3)) == "intra-server"
    assert classify(spec, ("srv1", 2), ("srv2", 2)) == "intra-rail"
    assert classify(spec, ("srv1", 0), ("srv2", 1)) == "inter-rail"
    assert classify(spec, ("srv1", 0), ("srv2", 1), pxn=True) == "inter-rail-pxn"
    assert classify(spec, ("srv1", 0), ("srv4", 1)) == "cross-group"
    assert classify(spec, ("srv1", 0), ("srv4", 1), pxn=True) == "cross-group"
    f = route(spec, Flow(("srv1", 0), ("srv2", 1)))
    assert (f.path_class, f.expected_hops) == ("inter-rail", 3)
    assert fabric_of(spec).rails_per_leaf == 1 and fabric_of(spec).groups == 2


def test_every_flow_class_comes_from_the_registry():
    """Each shipped class declares its own predicate; only refinements lack a pattern."""
    for name, pc in path_classes().items():
        assert pc.matches is not None, name
        assert (pc.pattern is None) == (pc.refines is not None), name


def test_demo_iterates_the_registry():
    spec = _mini()
    flows = traffic_flows(spec)
    assert [f.path_class for f in flows] == [f.path_class for f in (
        flows_for(spec, "intra-server") + flows_for(spec, "intra-rail")
        + flows_for(spec, "inter-rail") + flows_for(spec, "inter-rail", pxn=True)
        + flows_for(spec, "cross-group"))]
    assert list(dict.fromkeys(f.path_class for f in flows)) == SHIPPED_RUN
    assert "dummy-cross-pod" not in {f.path_class for f in flows}


def test_registered_class_is_classified_and_run_by_the_demo(dummy):
    spec = _mini()  # built with the dummy registered: lab.json lists cross-pod
    assert spec.expected_hops[dummy.PATH_CLASS] == 5
    assert classify(spec, ("srv1", 0), ("srv4", 1)) == dummy.PATH_CLASS
    f = route(spec, Flow(("srv1", 0), ("srv4", 1)))
    assert (f.path_class, f.expected_hops, report_class(spec, f)) == (dummy.PATH_CLASS, 5,
                                                                     dummy.PATH_CLASS)
    # the shipped classes keep theirs (same GPU, or PXN)
    assert classify(spec, ("srv1", 0), ("srv4", 0)) == "cross-group"
    assert classify(spec, ("srv1", 0), ("srv4", 1), pxn=True) == "cross-group"
    classes = list(dict.fromkeys(f.path_class for f in traffic_flows(spec)))
    assert classes == SHIPPED_RUN + [dummy.PATH_CLASS]


def test_registered_class_absent_from_lab_is_not_run(dummy):
    spec = build_lab(load_intent("rail-only-512"), name=f"pr{PID}").spec
    assert dummy.PATH_CLASS not in spec.expected_hops
    assert dummy.PATH_CLASS not in {f.path_class for f in traffic_flows(spec)}


def test_same_leaf_refinement_is_registry_data():
    spec = build_lab(load_intent("rail-only-512"), name=f"rl{PID}").spec
    f = route(spec, Flow(("srv1", 0), ("srv2", 1)))
    assert report_class(spec, f) == "inter-rail-same-leaf" and f.expected_hops == 1
    listed = dict(spec.expected_hops)
    listed.pop("inter-rail-same-leaf")
    path = pathclasses.FlowPath(fabric_of(spec), PathEnd("srv1", 0, 1, "leaf1"),
                                PathEnd("srv2", 1, 1, "leaf1"))
    assert pathclasses.refine("inter-rail", path, listed) == "inter-rail"
    assert pathclasses.refine("inter-rail", path, spec.expected_hops) == "inter-rail-same-leaf"


def test_no_matching_class_is_a_clear_error():
    saved = dict(pathclasses._CLASSES)
    try:
        for name in list(pathclasses._CLASSES):
            pathclasses.unregister_path_class(name)
        fp = FlowPath(pathclasses.Fabric("rail-optimized", 8), PathEnd("a", 0, 1, "l"),
                      PathEnd("b", 0, 1, "l"))
        with pytest.raises(PathClassError, match="no registered path class matches a:gpu0"):
            pathclasses.classify(fp)
    finally:
        pathclasses._CLASSES.update(saved)
