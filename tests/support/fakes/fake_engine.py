"""The engine's side of a Construct call, on loopback gRPC: a resource monitor that records what a
component provider registers (the offline plan's RecordingMonitor behind the real
``pulumirpc.ResourceMonitor`` service) and an engine that collects log lines. With these, a test
runs the real provider process (``provider/__main__.py``) and calls it over its real gRPC API,
as ``pulumi up`` does for a program in another language."""

from __future__ import annotations

import asyncio
from concurrent import futures
from typing import Any

import grpc
from pulumi.runtime.proto import engine_pb2_grpc, resource_pb2, resource_pb2_grpc

from tpu_training import offline


def _with_event_loop() -> None:
    # The mock monitor (de)serializes properties with the SDK's async helpers.
    try:
        asyncio.get_event_loop()
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())


class _Recorder(offline.RecordingMonitor):
    def __init__(self, project: str, stack: str) -> None:
        super().__init__(offline.PlanMocks())
        self.project, self.stack = project, stack

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        # The test process has no Pulumi settings of its own: name URNs for the caller's stack.
        if parent:
            type_ = parent.split("::")[2].split("$").pop() + "$" + type_
        return f"urn:pulumi:{self.stack}::{self.project}::{type_}::{name}"


class _Monitor(resource_pb2_grpc.ResourceMonitorServicer):
    def __init__(self, recorder: _Recorder) -> None:
        self.recorder = recorder

    def SupportsFeature(self, request: Any, context: Any) -> Any:
        _with_event_loop()
        answer = self.recorder.SupportsFeature(request)
        return resource_pb2.SupportsFeatureResponse(hasSupport=answer.hasSupport)

    def GetDeploymentInfo(self, request: Any, context: Any) -> Any:
        return self.recorder.GetDeploymentInfo(request)

    def RegisterResource(self, request: Any, context: Any) -> Any:
        _with_event_loop()
        return self.recorder.RegisterResource(request)

    def RegisterResourceOutputs(self, request: Any, context: Any) -> Any:
        _with_event_loop()
        return self.recorder.RegisterResourceOutputs(request)

    def ReadResource(self, request: Any, context: Any) -> Any:
        _with_event_loop()
        return self.recorder.ReadResource(request)

    def Invoke(self, request: Any, context: Any) -> Any:
        _with_event_loop()
        return self.recorder.Invoke(request)

    def RegisterPackage(self, request: Any, context: Any) -> Any:
        return self.recorder.RegisterPackage(request)


class _Engine(engine_pb2_grpc.EngineServicer):
    def __init__(self) -> None:
        self.logs: list[tuple[int, str]] = []

    def Log(self, request: Any, context: Any) -> Any:
        from google.protobuf import empty_pb2

        self.logs.append((request.severity, request.message))
        return empty_pb2.Empty()


class FakeEngine:
    """``with FakeEngine(project, stack) as engine:`` serves a monitor and an engine on loopback;
    ``engine.registrations`` is what was registered, ``engine.logs`` what was logged."""

    def __init__(self, project: str, stack: str) -> None:
        self.recorder = _Recorder(project, stack)
        self.engine = _Engine()
        # One worker: registrations arrive in the order the provider sends them.
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        resource_pb2_grpc.add_ResourceMonitorServicer_to_server(_Monitor(self.recorder), self.server)
        engine_pb2_grpc.add_EngineServicer_to_server(self.engine, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def knows(self, urn: str, id_: str, state: dict[str, Any]) -> None:
        """A resource registered earlier in the deployment, which a resource reference may name."""
        self.recorder.resources[urn] = offline.pulumi_mocks.MockMonitor.ResourceRegistration(urn, id_, state)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def registrations(self) -> list[offline.Registration]:
        return sorted(self.recorder.registrations.values(), key=lambda r: r.urn)

    @property
    def logs(self) -> list[tuple[int, str]]:
        return self.engine.logs

    def __enter__(self) -> FakeEngine:
        self.server.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.server.stop(grace=None)
