"""The feature stores on one database, for tests that drive stores directly (no HTTP).

``Stores`` opens the database the settings name and hands out each feature's store on it, as
the app's lifespan does: ``stores.plants``, ``stores.tokens``, ``stores.sandbox``.
"""

from __future__ import annotations

from plantstore.auth.backends import token_store_for
from plantstore.auth.store import TokenStore
from plantstore.db import Database, open_database
from plantstore.plants.backends import plant_store_for
from plantstore.plants.store import PlantStore
from plantstore.sandbox.backends import sandbox_store_for
from plantstore.sandbox.store import SandboxStore
from plantstore.settings import Settings


class Stores:
    """Each feature's store on the database ``settings`` name; ``open`` before use."""

    def __init__(self, settings: Settings) -> None:
        self.database: Database = open_database(settings)
        self.plants: PlantStore = plant_store_for(self.database, settings.max_plants_per_user)
        self.tokens: TokenStore = token_store_for(self.database)
        self.sandbox: SandboxStore = sandbox_store_for(self.database)

    async def open(self) -> None:
        await self.database.open()

    async def close(self) -> None:
        await self.database.close()
