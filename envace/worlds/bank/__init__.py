"""The bank domain: accounts, balances and transfers."""

from envace.worlds.bank import tasks
from envace.worlds.bank.db import ACCOUNTS, OWNERS, BankDB, random_bank
from envace.worlds.bank.tools import BankTools
from envace.worlds.bank.verifier import VERIFIER
from envace.worlds.base import DomainSpec, Shape

DOMAIN = DomainSpec(
    name="bank",
    system_prompt="You run a bank. Use the tools.",
    db_cls=BankDB,
    toolkit_cls=BankTools,
    random_db=random_bank,
    vocab={"account": ACCOUNTS, "owner": OWNERS},
    shapes=(
        Shape("check", "account", 1, tasks.check),
        Shape("deposit", "account", 1, tasks.deposit),
        Shape("owner_deposit", "owner", 1, tasks.owner_deposit),
        Shape("pair", "account", 2, tasks.pair),
        Shape("deposit_unless_frozen", "account", 2, tasks.deposit_unless_frozen),
        Shape("two_turn", "owner", 1, tasks.two_turn),
    ),
    verifier=VERIFIER,
)
