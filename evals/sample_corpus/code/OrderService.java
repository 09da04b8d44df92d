package com.example.roastery;

import java.util.ArrayList;
import java.util.List;

/** Handles customer orders for roasted coffee and computes shipping costs. */
public class OrderService {

    /** The state of an order from placement to delivery. */
    public enum OrderStatus { PLACED, ROASTING, SHIPPED, DELIVERED }

    /** Anything that can be priced. */
    public interface Priced {
        double price();
    }

    private final List<String> orders = new ArrayList<>();

    /** Places an order and returns its number. */
    public int placeOrder(String customer, double kilograms) {
        if (kilograms <= 0) {
            throw new IllegalArgumentException("kilograms must be positive");
        }
        orders.add(customer + ":" + kilograms);
        return orders.size();
    }

    /** Shipping is free above 5 kilograms; otherwise 4.50 plus 1.20 per kilogram. */
    public double shippingCost(double kilograms) {
        if (kilograms > 5.0) {
            return 0.0;
        }
        return 4.50 + 1.20 * kilograms;
    }
}
