# An OTLP/gRPC trace receiver that answers every export and counts the
# spans it got (written to the file named second, after each export).
import sys
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

count = {"spans": 0, "exports": 0}


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        count["exports"] += 1
        count["spans"] += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        with open(sys.argv[2], "w") as f:
            f.write(f'{count["exports"]} {count["spans"]}\n')
        return trace_service_pb2.ExportTraceServiceResponse()


server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
server.add_insecure_port(f"127.0.0.1:{sys.argv[1]}")
server.start()
server.wait_for_termination()
