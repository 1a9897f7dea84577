// A WebSocket app (ws) run by graceful-cluster:
//   npx graceful-cluster --workers 2 examples/websocket/server.js
// Then: a WebSocket client on ws://localhost:3000/ (it echoes), and Ctrl-C.
//
// On SIGTERM the helper tells the app through handle.onDrain(): each open
// WebSocket is closed with notice.closeCode (1001 "going away"; 1012 "service
// restart" on a reload), spread over the first half of notice.closeInMs so that
// thousands of clients do not all reconnect in the same millisecond. New
// handshakes in the reject phase get a 503 + Retry-After from graceful-cluster,
// before ws sees them. Whatever is still open when the reject phase ends is
// closed by graceful-cluster; the drain then finishes, the hooks run, exit 0.
import http from 'node:http';
import {WebSocketServer} from 'ws';
import {attach} from 'graceful-cluster/worker';

const port = Number(process.env.PORT ?? 3000);

const server = http.createServer((_request, response) => {
	response.end(`hello from websocket example (pid ${process.pid})\n`);
});

const wss = new WebSocketServer({server});
wss.on('connection', socket => {
	socket.on('message', data => socket.send(String(data)));
});

const handle = attach(server);
handle.onDrain(({reason, closeInMs, closeCode}) => {
	const sockets = [...wss.clients];
	console.log(JSON.stringify({msg: 'example: closing websockets', reason, sockets: sockets.length, closeInMs, pid: process.pid}));
	const spread = Math.min(closeInMs / 2, 5000);
	for (const [index, socket] of sockets.entries()) {
		setTimeout(() => {
			socket.close(closeCode, reason === 'reload' ? 'server restarting' : 'server shutting down');
		}, sockets.length > 1 ? (spread * index) / (sockets.length - 1) : 0);
	}
});
handle.onShutdown(async () => {
	// Every request is done and every WebSocket closed.
	console.log(JSON.stringify({msg: 'example: shutdown hook ran', pid: process.pid}));
});

server.listen(port);
