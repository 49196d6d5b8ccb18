"""Interactive API pages over ``/openapi.json``: Swagger UI at ``/docs``, Redoc at ``/redoc``.

Their scripts and stylesheets are served by the gateway itself from
``docs_static/`` (swagger-ui-dist and redoc, vendored with their licences, see
``docs_static/VENDORED.md``): the machines this runs on reach no CDN, and a browser
on an isolated network must still get a working page. Every URL in the pages is
relative, so they work behind a reverse proxy that mounts the gateway under a path.

Routes::

    GET /docs                 Swagger UI (try requests against this gateway)
    GET /redoc                Redoc (read-only reference)
    GET /docs/static/{file}   the vendored files (a fixed list; anything else 404)
"""

from __future__ import annotations

import functools
from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

STATIC = Path(__file__).with_name("docs_static")
#: the files served, and their media types: a fixed list, so no path from a client
#: ever reaches the filesystem
FILES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "swagger-init.js": "text/javascript; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "swagger-ui.LICENSE": "text/plain; charset=utf-8",
    "swagger-ui.NOTICE": "text/plain; charset=utf-8",
    "redoc.LICENSE": "text/plain; charset=utf-8",
}

SWAGGER_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>sparklog gateway API</title>
<link rel="stylesheet" href="docs/static/swagger-ui.css">
</head><body><div id="swagger-ui"></div>
<script src="docs/static/swagger-ui-bundle.js"></script>
<script src="docs/static/swagger-init.js"></script>
</body></html>
"""

REDOC_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>sparklog gateway API</title>
<style>body { margin: 0; padding: 0; }</style>
</head><body>
<redoc spec-url="openapi.json"></redoc>
<script src="docs/static/redoc.standalone.js"></script>
</body></html>
"""


#: the pages may load nothing but the gateway's own files: Redoc's sidebar links a logo
#: on a CDN, which this blocks (the machines reach no CDN; a page must not try). Inline
#: styles: both viewers set them; Redoc runs its search in a worker made from a blob.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
       "worker-src 'self' blob:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


@functools.lru_cache(maxsize=len(FILES))
def _read(name: str) -> bytes:
    return (STATIC / name).read_bytes()


async def swagger(request: Request) -> Response:
    return HTMLResponse(SWAGGER_PAGE, headers={"Content-Security-Policy": CSP})


async def redoc(request: Request) -> Response:
    return HTMLResponse(REDOC_PAGE, headers={"Content-Security-Policy": CSP})


async def static(request: Request) -> Response:
    """One vendored file; 404 for a name not in :data:`FILES`."""
    name = request.path_params["file"]
    if name not in FILES:
        raise HTTPException(404, f"no such file: {name[:100]!r}")
    # versioned by the package: a day of caching spares reloads of 3 MB of script
    return Response(_read(name), media_type=FILES[name],
                    headers={"Cache-Control": "public, max-age=86400"})


def routes() -> list[BaseRoute]:
    return [Route("/docs", swagger, methods=["GET"]),
            Route("/redoc", redoc, methods=["GET"]),
            Route("/docs/static/{file}", static, methods=["GET"])]
