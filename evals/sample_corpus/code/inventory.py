"""Inventory management for a small coffee roastery: stock levels, reorder points and roast batches."""
from dataclasses import dataclass, field


@dataclass
class Bean:
    """A green coffee lot with its origin and the kilograms in stock."""
    name: str
    origin: str
    stock_kg: float = 0.0


class Inventory:
    """Tracks green coffee stock and decides when to reorder."""

    def __init__(self, reorder_point_kg: float = 20.0):
        self.reorder_point_kg = reorder_point_kg
        self.beans = {}

    def receive(self, bean: Bean, kg: float) -> None:
        """Add a delivery of green coffee to the stock."""
        if kg <= 0:
            raise ValueError("delivery must be positive")
        current = self.beans.setdefault(bean.name, bean)
        current.stock_kg += kg

    def roast(self, name: str, kg: float) -> float:
        """Remove green coffee for a roast batch and return the roasted weight after 15 percent moisture loss."""
        bean = self.beans[name]
        if kg > bean.stock_kg:
            raise ValueError(f"only {bean.stock_kg} kg of {name} in stock")
        bean.stock_kg -= kg
        return kg * 0.85

    def needs_reorder(self) -> list:
        """Return the names of beans whose stock is below the reorder point."""
        return sorted(n for n, b in self.beans.items() if b.stock_kg < self.reorder_point_kg)


def economic_order_quantity(annual_demand_kg: float, order_cost: float, holding_cost_per_kg: float) -> float:
    """Wilson's economic order quantity: sqrt(2 * demand * order cost / holding cost)."""
    return (2 * annual_demand_kg * order_cost / holding_cost_per_kg) ** 0.5
