// A server-sent events app run by graceful-cluster:
//   npx graceful-cluster --workers 2 examples/sse/server.js
// Then: curl -N localhost:3000/events (or an EventSource), and Ctrl-C.
//
// On SIGTERM the helper tells the app through handle.onDrain(): each stream
// gets a `retry:` (when to reconnect) and ends, so EventSource reconnects, to
// another pod. A new /events request in the reject phase is answered by
// graceful-cluster with a 200 stream holding only `retry: <ms>` (never a 503,
// which would make EventSource give up for good). Streams still open when the
// reject phase ends are ended by graceful-cluster.
import http from 'node:http';
import {attach} from 'graceful-cluster/worker';

const port = Number(process.env.PORT ?? 3000);
const streams = new Set();

const server = http.createServer((request, response) => {
	if (request.url !== '/events') {
		response.end(`hello from sse example (pid ${process.pid})\n`);
		return;
	}

	response.writeHead(200, {'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store'});
	let id = Number(request.headers['last-event-id'] ?? 0);
	const tick = () => response.write(`id: ${++id}\ndata: tick ${id} from pid ${process.pid}\n\n`);
	tick();
	const timer = setInterval(tick, 250);
	streams.add(response);
	response.on('close', () => {
		clearInterval(timer);
		streams.delete(response);
	});
});

const handle = attach(server);
handle.onDrain(({reason, closeInMs}) => {
	console.log(JSON.stringify({msg: 'example: ending event streams', reason, streams: streams.size, closeInMs, pid: process.pid}));
	for (const response of streams) {
		response.end('retry: 1000\n\n');
	}
});
handle.onShutdown(async () => {
	console.log(JSON.stringify({msg: 'example: shutdown hook ran', pid: process.pid}));
});

server.listen(port);
