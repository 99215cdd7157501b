"""Another user on the node, for the soak's other_user fault: started as root,
it loads everything it needs, drops to the uid it is given (no groups), and
then, through the daemon's socket, tries the victim's session by its id
(GetState, SaveState into a folder of its own, CloseSession) and opens the
victim's job and rank for itself on the inline transport. It prints one JSON
object: the outcome of each (OK, or the client's exception class for the
daemon's answer) and the id of the session it got.

Argument: one JSON object with uid, socket, session, job (the victim's, at
dp_rank 0 of 1), config and folder."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Dict

import grpc
from dataloaderd import Loader
from dataloaderd.errors import from_rpc_error
from dataloaderd._proto import dataloader_pb2 as pb
from dataloaderd._proto import dataloader_pb2_grpc as pb_grpc


def outcome(call: Callable[[], object]) -> str:
    try:
        call()
        return "OK"
    except grpc.RpcError as e:
        return type(from_rpc_error(e)).__name__


def main(a: Dict[str, Any]) -> None:
    os.setgroups([])
    os.setgid(a["uid"])
    os.setuid(a["uid"])
    got: Dict[str, str] = {}
    with grpc.insecure_channel("unix://" + a["socket"]) as ch:
        stub = pb_grpc.LoaderStub(ch)
        sid = a["session"]
        got["GetState"] = outcome(lambda: stub.GetState(pb.GetStateRequest(session_id=sid), timeout=30))
        got["SaveState"] = outcome(lambda: stub.SaveState(pb.SaveStateRequest(session_id=sid, folder=a["folder"]),
                                                          timeout=30))
        got["CloseSession"] = outcome(lambda: stub.CloseSession(pb.CloseSessionRequest(session_id=sid), timeout=30))
    with Loader(a["config"], socket=a["socket"], dp_rank=0, dp_size=1, job=a["job"],
                transport="inline", batch_timeout=60) as loader:
        next(iter(loader))
        got["own_session"] = loader._session.session_id if loader._session is not None else ""
    print(json.dumps(got))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
